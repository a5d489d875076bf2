"""The judge room: the one way into the oracle (`reference/`) and everything that turns a
backend's output into verdicts.

The oracle facade (`oracle`, and `peer_oracle` for the peer profiles), the tokens a transcript
lets the oracle predict from (`transcripts`), the comparisons (`compare`) and the explanation of a
mismatch from the oracle's decision trace (`explain`), judging a run (`judging`), the verdict
model (`verdicts`), the numerical judge and the reuse timing verdict. No other room of
conformance/ imports `reference`.
"""
