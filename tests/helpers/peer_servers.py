"""Helpers of the peer-suite tests: the bundled server in a thread, and a peer run in process.

    with serving(peer) as url: ...            # gpu_backend.serve.PeerServer on 127.0.0.1:<free port>
    rc, report = run_peers(url, profile, tmp_path, "--peer-setting", "cache_blocks=24")
"""
from __future__ import annotations

import json
from pathlib import Path

from conformance.adapters.bundled_server import serving_peer
from conformance.cli import main as kvconform

ROOT = Path(__file__).resolve().parents[2]
PHI3 = str(ROOT / "spec" / "tokenizers" / "phi-3-mini")


serving = serving_peer
"""`with serving(peer) as url`: the adapter's own server thread (conformance/adapters/bundled_server.py)."""


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


PHI3_VISION = ROOT / "spec" / "tokenizers" / "phi-3-vision"
QWEN2_VL_PROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "merge_size": 2,
                      "temporal_patch_size": 2, "min_pixels": 3136, "max_pixels": 12845056}
"""Qwen2-VL's preprocessor_config.json: a 16x16 image takes 4 tokens (resized to 56x56)."""


def vision_tokenizer(folder: Path, processor: dict | None = None) -> str:
    """A vision model's folder as the kit and the bundled server read it: the vendored Phi-3-vision
    tokenizer (its single `<|image|>` token) beside a Qwen2-VL `preprocessor_config.json` (or
    `processor`), which says how many tokens an image takes."""
    import shutil
    out = Path(folder) / "vision-tokenizer"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(PHI3_VISION / name, out / name)
    (out / "preprocessor_config.json").write_text(json.dumps(processor or QWEN2_VL_PROCESSOR))
    return str(out)


def build_vision_engine(folder: Path, loader: str) -> tuple[str, str]:
    """(engine folder, tokenizer folder): the bundled server's default engine with a vision encoder."""
    from gpu_backend.serve import build_default_engine
    tokenizer = vision_tokenizer(folder)
    return build_default_engine(tokenizer, loader, str(Path(folder) / f"vision-{loader}")), tokenizer


def build_engine(folder: Path, loader: str) -> str:
    """The bundled server's default engine (2 layers, adapters alpha and beta) around Phi-3-mini."""
    from gpu_backend.serve import build_default_engine
    return build_default_engine(PHI3, loader, str(Path(folder) / loader))
