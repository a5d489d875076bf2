"""Shared fixtures of the backend tests: tiny engines built once per session.

Plain helpers live in tests/helpers/backend.py.
"""
import json

import pytest

from gpu_backend import build_engine
from tests.helpers.backend import DEFAULT_BUILD_ARGS


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
