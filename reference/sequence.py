"""The state of one sequence during its batch, and the per-request facts it reports (CR-MET-13)."""

from dataclasses import dataclass, field

from .identity import TokenHistory
from .planning import Plan


@dataclass(eq=False)
class Sequence:
    """One request of a batch, in its slot. `generated_count` is g, the number of tokens it
    generates: known from the transcript, or max_generate_length when `generated` is None
    (unknown)."""
    request: object
    slot: int
    history: TokenHistory
    n: int
    generated_count: int
    generated: list | None
    bypass: bool
    plan: Plan | None = None
    forced_cold: bool = False
    hybrid_restore: bool = False
    pages: list = field(default_factory=list)
    paired: bool = False
    """An EAGLE sequence that holds managed draft pages and publishes pairs (CR-SPEC-6)."""
    draft_pages: list | None = None
    last_accepted: int | None = None
    """The tokens its last EAGLE verification accepted, as the backend reported it (CR-SPEC-4);
    None: not reported."""
    slot_pins: list = field(default_factory=list)
    published_pages: int = 0
    checkpoint_length: int = 0
    """The length L of the last checkpoint it published (CR-HYB-3); 0: none."""
    pressure_skips: int = 0
    publications: list = field(default_factory=list)
    ordinal: int = 0
    """Its place among every request the runtime instance has run (the trace's request number)."""
    warmup: int = 0
    """The warmup run it belongs to (1 .. --warmup, CR-POL-4); 0: a request of the file."""
    outputs_defined: bool = True
    """False when the sequence reuses KV computed for other media than its own (a profile whose
    identity conflates items, spec/profiles.md): its outputs need not equal a bypass run's."""
    steps: object = None
    """While tracing, its recorder (reference.trace.Steps): what the deciding functions record
    its steps with."""

    @property
    def lookup_bypass(self) -> bool:
        """CR-MET-4: it did not look up (explicit, forced or warmup bypass, or forced cold)."""
        return self.bypass or self.forced_cold

    def facts(self) -> dict:
        """The per-request cache facts (spec/schemas/common.schema.json#/$defs/requestCache)."""
        return {
            "plan": self.plan.kind,
            "matched_tokens": self.plan.matched,
            "reused_tokens": self.plan.reused,
            "media_aware": self.history.media_aware,
            "lookup_bypass": self.lookup_bypass,
            "forced_cold": self.forced_cold,
            "hybrid_restore": self.hybrid_restore,
            "snapshot_pressure_skips": self.pressure_skips,
            "publications": list(self.publications),
        }
