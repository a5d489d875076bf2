"""`--timeout` is a deadline per request, not per read (conformance/adapters/openai.py): a server
that trickles its answer, a byte every 0.3 s, once held a run for as long as it trickled (each
read came within the read timeout). Now every socket operation waits only what is left of the
request's deadline, for the headers and the body alike."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from conformance.adapters.openai import OpenAIClient, ServerFailure
from tests.robustness.bounded import measured

BODY = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
TRICKLE_S = 0.3          # one byte this often: the whole answer would take about a minute


class Trickler:
    """An HTTP server on 127.0.0.1 that answers every request one byte at a time (from the status
    line on, or from the body on with `headers_at_once`)."""

    def __init__(self, headers_at_once: bool):
        self.headers_at_once = headers_at_once
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(BODY) * 4).encode() + b"\r\n\r\n")
        slow = BODY * 4
        try:
            conn.recv(65536)
            if self.headers_at_once:
                conn.sendall(head)
            else:
                slow = head + slow
            for i in range(len(slow)):
                if self.stop.is_set():
                    break
                conn.sendall(slow[i:i + 1])
                time.sleep(TRICKLE_S)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture(params=[False, True], ids=["trickled-headers", "trickled-body"])
def trickler(request):
    server = Trickler(headers_at_once=request.param)
    yield server
    server.close()


def test_the_timeout_is_a_deadline_per_request(trickler):
    client = OpenAIClient(trickler.url + "/v1", timeout=1.5)
    started = time.monotonic()
    with pytest.raises(ServerFailure) as e:
        client.get("/v1/models")
    elapsed = time.monotonic() - started
    client.close()
    assert e.value.kind == "timeout" and "within 1.5 s" in e.value.message, e.value.message
    assert elapsed < 1.5 + 5.0, f"the request took {elapsed:.1f} s; the server would trickle for a minute"


def test_a_run_against_a_trickling_server_ends_by_its_timeout_in_bounded_memory(trickler, tmp_path):
    started = time.monotonic()
    got = measured("conformance.cli", ["run", "--backend", "openai", "--base-url", trickler.url, "--timeout", "2",
                                       "--profile", "llama.cpp-server", "--no-progress",
                                       "--report", tmp_path / "r"], tmp_path, timeout=120)
    elapsed = time.monotonic() - started
    lines = [line for line in got.err.splitlines() if line.strip()]
    assert got.rc == 2 and len(lines) == 1 and "no answer within 2 s" in lines[0], got.err[-2000:]
    assert elapsed < 45, f"{elapsed:.0f} s: the run was held past its --timeout (the trickle lasts a minute)"
    assert got.rss_mb < 1024 and got.cpu_s < 10, (got.rss_mb, got.cpu_s)
