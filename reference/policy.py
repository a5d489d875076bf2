"""Lookup and commit policy (spec/context-reuse.md section 5, CR-POL-1 .. CR-POL-6).

The values themselves are checked when the request file is parsed (requests.py: CR-POL-1 and
CR-POL-5 make any other value an input error).
"""

USE_CACHE, BYPASS = "use_cache", "bypass"
INCLUDING_GENERATED, PREFILL_ONLY = "including_generated_tokens", "prefill_state_only"


def bypasses_lookup(file_policy: str, flags, warmup: int, steps=None) -> bool:
    """Whether a sequence skips lookup and publication.

    CR-POL-1/CR-POL-2: the file's `context_cache_lookup_policy` applies to every sequence.
    CR-POL-3: hidden-state output forces bypass for every request of the run.
    CR-POL-4: warmup runs of the first batch are bypass (`warmup`: the run's number, 0: none).
    CR-POL-6: without context reuse every sequence behaves as a bypass: its pages are private
    and come from the same pool (CR-CAP-3), but nothing is looked up or published.
    `steps`: the sequence's trace recorder (reference/trace.py), or None.
    """
    if warmup:
        rule, why = "CR-POL-4", "warmup run {warmup} of the first batch runs under bypass"
    elif flags.output_hidden_states:
        rule, why = "CR-POL-3", "hidden-state output forces every request to bypass lookup"
    elif file_policy == BYPASS:
        rule, why = "CR-POL-2", "the file's lookup policy is bypass"
    elif not reuse_enabled(flags):
        rule, why = "CR-POL-6", "context reuse is not enabled: nothing is looked up or published"
    else:
        if steps is not None:
            steps("CR-POL-1", "lookup_bypass", False,
                  f"the file's lookup policy is {file_policy}: {steps.name} looks up")
        return False
    if steps is not None:
        steps(rule, "lookup_bypass", True, why.format(warmup=warmup))
    return True


def includes_generated(commit_policy: str) -> bool:
    """CR-POL-5 / CR-PUB-3: only `including_generated_tokens` publishes at decode end."""
    return commit_policy == INCLUDING_GENERATED


def reuse_enabled(flags) -> bool:
    """CR-POL-6: without --enableContextReuse nothing is looked up or published, the profile
    has no context_cache section, the snapshot budgets have no effect, and prefill reuses 0;
    the page pool still bounds admission and decode growth (CR-CAP-3, CR-CAP-8, CR-CAP-9)."""
    return flags.enable_context_reuse
