"""The bundled OpenAI-compatible server (`python -m gpu_backend serve`) in a thread of this process.

For a runner that judges the bundled server's code as it is loaded here (the mutation campaign
loads one mutated module of it, conformance/mutation/): `kvconform run --backend openai` then
talks to it over HTTP on a loopback port, as it talks to any server.

    engine = default_engine(tokenizer, loader, folder)          # built once, shared by every run
    with serving(profile, engine, settings) as url: ...
"""
from __future__ import annotations

import contextlib
import threading


def default_engine(tokenizer: str, loader: str, folder: str) -> str:
    """The server's default engine around `tokenizer` (what `serve` builds when given none)."""
    from gpu_backend.serve import build_default_engine
    return build_default_engine(tokenizer, loader, folder)


@contextlib.contextmanager
def serving(profile: str, engine_dir: str, settings: dict, tokenizer: str | None = None, engine=None):
    """Serve `profile` with `settings` on a free loopback port until the block ends; yields its URL.
    `engine`: the server's model already loaded from `engine_dir` (gpu_backend.peer_engine.PeerEngine)."""
    from gpu_backend.serve import make_peer
    with serving_peer(make_peer(profile, engine_dir, tokenizer=tokenizer, settings=settings, engine=engine)) as url:
        yield url


@contextlib.contextmanager
def serving_peer(peer):
    """Serve `peer` (a gpu_backend.serve.PeerServer) in a thread on a free loopback port until the
    block ends; yields its URL."""
    from gpu_backend.serve import make_http_server
    httpd = make_http_server(peer, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
