"""The numerical reference: what an engine's weights say, computed in float64 (a second oracle).

Comparing a run with reuse to the backend's own `bypass` replay shows that reuse changed
nothing; it cannot show that the model is right (a backend whose attention ignores its cache, or
whose logits are garbage, is wrong the same way twice). Where the backend's manifest declares a
numerical reference (`numerical_reference`, spec/schemas/capabilities.schema.json), every greedy
request that generated tokens is also scored here, teacher-forced on the backend's own tokens
(spec/RUNNING.md section 5); the runner judges the numbers (conformance/judge/numerical_judge.py).

    layout.py    the reference weight layout (spec/engine.md section 5), read as float64
    forward.py   the float64 NumPy forward: attention, recurrence, LoRA, image and audio encoders
    media.py     a request's media items decoded again, checked against the oracle's identities
    scoring.py   teacher-forced log-probabilities of one request and the size of KV rounding on it
    store.py     the on-disk result cache (engine digest + request)
    source.py    weights or a reference command, as the manifest declares
    __main__.py  `python -m numerical_reference`: the kit's forward as a reference command

Its dependency rule (tests/test_boundaries.py): numpy, safetensors, threadpoolctl, Pillow (image
decoding), the standard library and `reference` (engine descriptions, request parsing, media
identities) only; never the bundled backend (`gpu_backend`), torch or the runner
(`conformance`). A reference that shared the backend's loader or kernels would share its bugs.
"""
from __future__ import annotations

from .source import CommandReference, ReferenceUnavailable, WeightsReference, reference_for

__all__ = ["reference_for", "ReferenceUnavailable", "WeightsReference", "CommandReference"]
