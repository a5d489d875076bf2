"""`kvconform simulate --trace`: the reference simulator on recorded traffic (docs/simulate.md,
spec/trace-replay.md).

A trace file (Mooncake's hash-id JSONL, a request file of the kit, an OpenAI-style chat log) is
read and checked line by line (`formats.py`), turned into the oracle's traffic requests and
replayed through each profile at each capacity (conformance/judge/traffic.py: the judge is the
one room that imports the oracle), and the summaries written as a table, JSON, a PNG plot and an
HTML page (`outputs.py`). The command's options are parsed in `options.py`; the command itself is
`command.py`, started by conformance/commands/simulate.py.
"""
