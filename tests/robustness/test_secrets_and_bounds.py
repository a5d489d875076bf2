"""Secrets never leave the kit, and what a server sends is bounded (spec/RUNNING.md section 8).

A stand-in llama.cpp server (tests/robustness/test_fake_servers.py) that, in `echo-key` mode,
answers every chat with a 401 whose body quotes the Authorization header (as misconfigured
gateways do), and in `huge-body` mode answers with a body of 40 MB."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from conformance.cli import main as kvconform

from tests.robustness.test_fake_servers import FakeLlamaServer, serving

KEY = "sk-test-SECRET-0123456789abcdef"
HUGE = [b"{\"pad\": \""] + [b"x" * (1 << 20)] * 40 + [b"\"}"]   # 40 MB sent, one 1 MiB chunk held
PASSWORD = "hunter2-PASSWORD"


class Gateway(FakeLlamaServer):
    def __init__(self, mode: str):
        super().__init__("ok")
        self.gateway_mode = mode

    def serve(self, method, path, body, headers):
        if path.startswith("/v1/chat/completions"):
            if self.gateway_mode == "echo-key":
                return 401, {"error": {"message": f"invalid credentials: {headers.get('Authorization')}"}}
            if self.gateway_mode == "huge-body":
                return 200, HUGE
        return self.handle(method, path, body)


@contextlib.contextmanager
def gateway(mode: str):
    """The gateway on a free loopback port; yields the port."""
    with serving(Gateway(mode)) as url:
        yield int(url.rsplit(":", 1)[1])


def everything_written(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_an_echoed_api_key_is_masked_everywhere(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PEER_KEY", KEY)
    with gateway("echo-key") as port:
        code = kvconform(["run", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}", "--profile",
                          "llama.cpp-server", "--api-key-env", "PEER_KEY", "-k", "boundaries", "--no-progress",
                          "--report", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    assert code == 1
    written = everything_written(tmp_path / "r")
    assert "invalid credentials: Bearer ***" in written, "the echo is kept, the key masked"
    for name in ("report.json", "junit.xml", "summary.md"):
        assert (tmp_path / "r" / name).exists()
    assert list((tmp_path / "r").rglob("transcript.json")), "the transcripts are written too"
    assert KEY not in written and KEY not in out and KEY not in err


def test_credentials_in_the_base_url_are_never_printed_or_stored(tmp_path, capsys):
    with gateway("echo-key") as port:
        url = f"http://admin:{PASSWORD}@127.0.0.1:{port}"
        code = kvconform(["run", "--backend", "openai", "--base-url", url, "--profile", "llama.cpp-server",
                          "-k", "boundaries", "--report", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    assert code == 1
    written = everything_written(tmp_path / "r")
    for text in (written, out, err):
        assert PASSWORD not in text and "admin:" not in text
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert doc["backend"]["settings"]["base_url"] == f"http://127.0.0.1:{port}"
    assert all("admin" not in (c.get("rerun") or "") for c in doc["cases"])


def test_a_huge_body_is_not_read_whole(tmp_path, capsys):
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with gateway("huge-body") as port:
        code = kvconform(["run", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}", "--profile",
                          "llama.cpp-server", "-k", "boundaries/replay-at-kB", "--no-progress", "--report", str(tmp_path / "r")])
    capsys.readouterr()
    assert code == 1
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert {c["verdict"] for c in doc["cases"]} == {"ERROR"}
    assert any("larger than 16 MiB" in json.dumps(c) for c in doc["cases"])
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 100, f"peak memory grew by {grown_mb:.0f} MB"
