"""The version of the spec this oracle transcribes (spec/context-reuse.md), written into every
prediction file and report."""

SPEC_VERSION = "3.0.0"
