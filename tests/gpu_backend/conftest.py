"""Shared fixtures of the backend tests: tiny engines built once per session.

Plain helpers live in backend_helpers.py (a unique module name: `from conftest import ...`
would pick up another folder's conftest when several test folders run together).
"""
import json

import pytest

from backend_helpers import DEFAULT_BUILD_ARGS
from gpu_backend import build_engine


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    """engine(**build_args) -> engine directory; each distinct argument set is built once."""
    built = {}

    def make(**kw):
        args = {**DEFAULT_BUILD_ARGS, **kw}
        key = json.dumps(args, sort_keys=True)
        if key not in built:
            d = tmp_path_factory.mktemp("engine")
            build_engine(d, args)
            built[key] = d
        return built[key]
    return make
