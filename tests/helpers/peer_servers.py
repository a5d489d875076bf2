"""Helpers of the peer-suite tests: the bundled server in a thread, and a peer run in process.

    with serving(peer) as url: ...            # gpu_backend.serve.PeerServer on 127.0.0.1:<free port>
    rc, report = run_peers(url, profile, tmp_path, "--peer-setting", "cache_blocks=24")
"""
from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

from conformance.cli import main as kvconform

ROOT = Path(__file__).resolve().parents[2]
PHI3 = str(ROOT / "spec" / "tokenizers" / "phi-3-mini")


@contextlib.contextmanager
def serving(peer):
    """Serve `peer` (a gpu_backend.serve.PeerServer) on a free loopback port until the block ends."""
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


def run_peers(url: str, profile: str, folder: Path, *extra: str, tokenizer: str | None = PHI3) -> tuple[int, dict]:
    """`kvconform run --backend openai` in process: (exit code, report.json or {})."""
    report = Path(folder) / "report"
    argv = ["run", "--backend", "openai", "--base-url", url, "--profile", profile, "--report", str(report),
            "--force", "--no-progress", "--timeout", "30", *extra]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    rc = kvconform(argv)
    path = report / "report.json"
    return rc, (json.loads(path.read_text()) if path.exists() else {})


def build_engine(folder: Path, loader: str) -> str:
    """The bundled server's default engine (2 layers, adapters alpha and beta) around Phi-3-mini."""
    from gpu_backend.serve import build_default_engine
    return build_default_engine(PHI3, loader, str(Path(folder) / loader))
