"""Bounds on what one request may hold before the runtime tokenizes it (spec/RUNNING.md section 8)."""

INPUT_TEXT_BYTES = 1 << 20
"""Text a request may hold before it is tokenized, as Edge-LLM bounds it (kMaxInputTextSizeBytes,
cpp/common/inputLimits.h:66): a longer request is refused at once, not tokenized for minutes
before its length fails the batch."""
