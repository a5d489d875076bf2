"""The inprocess adapter's handling of a misbehaving backend object: an exception is a crash
(ERROR with the traceback), a hang is a TIMEOUT, bad input is an input error."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from conformance.adapters.base import Engine
from conformance.adapters.inprocess import InprocessSession, InvocationTimeout, time_limit


class BackendInputError(Exception):
    def __init__(self, path, message):
        super().__init__(message)
        self.path, self.message = path, message


class DeploymentRejected(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


def fake_backend(infer):
    class Runtime:
        def __init__(self, engine_dir, **kwargs):
            if kwargs.get("tp_size", 1) > 1:
                raise DeploymentRejected("Tensor-parallel context reuse is not supported yet")

        def infer(self, request, base_dir, **kwargs):
            return infer(request)

        def profile(self):
            return {}
    return SimpleNamespace(Runtime=Runtime, BackendInputError=BackendInputError, DeploymentRejected=DeploymentRejected)


def session(infer, runtime=None, timeout=5.0):
    return InprocessSession(fake_backend(infer), Engine("e", {}, "/nowhere"), runtime or {}, "cpu", timeout)


def test_an_exception_is_a_crash_with_its_traceback():
    def explode(request):
        raise ZeroDivisionError("boom")
    got = session(explode).run({"requests": []}, ".")
    assert got.outcome == "crash" and "ZeroDivisionError" in got.message and "explode" in got.stderr_tail


def test_a_hang_is_a_timeout():
    got = session(lambda r: time.sleep(5), timeout=0.2).run({"requests": []}, ".")
    assert got.outcome == "timeout"


def test_bad_input_and_refusal():
    def refuse(request):
        raise BackendInputError("$.requests[0]", "bad")
    got = session(refuse).run({"requests": []}, ".")
    assert (got.outcome, got.error_path, got.exit_code) == ("input_error", "$.requests[0]", 2)
    got = session(refuse, {"tpSize": 2, "enableContextReuse": True}).run({"requests": []}, ".")
    assert got.outcome == "rejected" and "Tensor-parallel" in got.message


def test_garbage_return_value_is_a_crash():
    assert session(lambda r: [1, 2]).run({"requests": []}, ".").outcome == "crash"


def test_time_limit_interrupts():
    with pytest.raises(InvocationTimeout):
        with time_limit(0.1):
            time.sleep(2)
