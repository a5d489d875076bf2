"""Seeded faults for testing the runner itself: the reference adapter with one rule broken.

Each mutant patches one function of the oracle's batching module *only while the mutant
backend runs*, so the oracle that judges it still follows the spec. A runner that lets a mutant
pass is not checking the rule the mutant breaks.
"""
from __future__ import annotations

from contextlib import contextmanager

from reference import batching
from reference.planning import Plan

from conformance.adapters.reference import ReferenceAdapter, ReferenceSession


def _no_trim(plan, history, n, page_size, test="same-item", steps=None):
    """CR-MEDIA-3 broken: a page boundary may split a media item."""
    return plan


def _no_rewind(history, n, page_size, index, steps=None):
    """CR-PLAN-2 broken: a fully matched aligned input keeps every page... minus nothing."""
    plan = ORIGINAL["plan_vanilla"](history, n, page_size, index, steps)
    if plan.kind == "full_input_rewind" and n > page_size:
        # keep one more page than allowed is impossible (reused < n); instead count it as standard
        return Plan("standard", plan.reused, plan.reused, plan.kept, plan.private, plan.record)
    return plan


def _no_adapter(lora_name):
    """CR-ID-3 broken: the LoRA adapter is not part of the page identity."""
    return ORIGINAL["adapter_root"](None)


ORIGINAL = {"trim_media_boundary": batching.trim_media_boundary, "plan_vanilla": batching.plan_vanilla,
            "adapter_root": batching.adapter_root}
MUTANTS = {"no_media_trim": {"trim_media_boundary": _no_trim},
           "no_rewind_accounting": {"plan_vanilla": _no_rewind},
           "lora_not_in_identity": {"adapter_root": _no_adapter}}


@contextmanager
def patched(name: str):
    patches = MUTANTS[name]
    for attr, fn in patches.items():
        setattr(batching, attr, fn)
    try:
        yield
    finally:
        for attr in patches:
            setattr(batching, attr, ORIGINAL[attr])


class MutantSession(ReferenceSession):
    def __init__(self, engine, runtime, mutant):
        super().__init__(engine, runtime)
        self.mutant = mutant

    def run(self, request, base_dir):
        with patched(self.mutant):
            return super().run(request, base_dir)


class MutantAdapter(ReferenceAdapter):
    def __init__(self, mutant: str):
        self.mutant = mutant
        self.name = f"mutant:{mutant}"

    def start(self, engine, runtime):
        return MutantSession(engine, runtime, self.mutant)
