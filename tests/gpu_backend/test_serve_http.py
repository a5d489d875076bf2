"""The bundled server's HTTP side (gpu_backend/serve.py) behaves as real servers do on a socket:
it answers a second connection while a first one stays open, and a small answer is not held
back by Nagle's algorithm (headers and body are two writes; without TCP_NODELAY the body waits
for the client's delayed ACK, 40 ms on Linux, a quarter of a peer run's time)."""
from __future__ import annotations

import http.client
import time

import pytest

from gpu_backend.peer_cache import SERVED
from gpu_backend.serve import PeerServer

from tests.helpers.peer_servers import serving


class _NoEngine:
    """Enough of an engine for the routes that never reach the model."""
    cfg = {"max_input_len": 16}


@pytest.fixture
def url():
    with serving(PeerServer("vllm-apc", _NoEngine(), SERVED["vllm-apc"].cache())) as u:
        yield u


def _connection(url: str) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=5)


def _health(conn: http.client.HTTPConnection) -> int:
    conn.request("GET", "/health")
    response = conn.getresponse()
    response.read()
    return response.status


def test_a_second_connection_is_answered_while_the_first_stays_open(url):
    first, second = _connection(url), _connection(url)
    try:
        assert _health(first) == 200               # kept alive (HTTP/1.1), idle from here on
        started = time.monotonic()
        assert _health(second) == 200
        assert time.monotonic() - started < 2.0, "the second connection waited for the first"
    finally:
        first.close()
        second.close()


def test_small_answers_are_not_delayed_on_a_kept_alive_connection(url):
    conn = _connection(url)
    try:
        _health(conn)
        started = time.monotonic()
        for _ in range(30):
            assert _health(conn) == 200
        # 30 delayed ACKs would take 1.2 s or more; without them this is a few milliseconds
        assert time.monotonic() - started < 0.9
    finally:
        conn.close()
