"""The version of the spec this oracle transcribes (spec/context-reuse.md), written into every
prediction file and report."""

SPEC_VERSION = "2.0.0"
