"""Fixtures of the robustness tests, and the fuzz budget knob.

The default budget keeps every fuzz test of this folder together well under a minute of one
core, with fixed examples (`derandomize`) so the default test run is reproducible. A longer
budget is one flag away and draws fresh random examples each time:

    .venv/bin/python -m pytest tests/robustness --fuzz-examples 5000
    KVCONFORM_FUZZ_EXAMPLES=5000 tools/test.sh tests/robustness     # the same, through the env

(`--fuzz-examples` is known to pytest when tests/robustness is on the command line; the
environment variable works from anywhere.)
"""
from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--fuzz-examples", type=int, default=None,
                     help="examples per fuzz test (default: a small fixed budget; env KVCONFORM_FUZZ_EXAMPLES)")


@pytest.fixture(scope="session")
def fuzz_budget(request):
    """(examples multiplier, derandomize): 1.0 and fixed examples unless a budget was asked for."""
    asked = request.config.getoption("--fuzz-examples", default=None) or os.environ.get("KVCONFORM_FUZZ_EXAMPLES")
    if asked:
        return int(asked), False
    return None, True


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """A temp folder with media (good and hostile), an engine with both encoders and two
    adapters, and its config.json path."""
    import torch
    from gpu_backend import build_engine

    from tests.robustness import fixtures
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("robustness")
    media, paths = fixtures.make_media(root)
    engine = root / "engine"
    build_engine(engine, fixtures.ENGINE_ARGS)
    # request files name adapters as "lora/a.safetensors", relative to their own folder (CR-BATCH-4)
    (root / "req" / "lora").symlink_to(engine / "lora", target_is_directory=True)
    return {"root": root, "media": media, "paths": paths, "engine": engine, "config": engine / "config.json",
            "req": root / "req"}
