"""The cross-check: the runtimes' own cache classes and the oracle, side by side on generated
request streams (docs/crosscheck.md).

    streams.py      seeded streams (parity peer scenarios) aimed at the rules' edges
    driver.py       the runtime's side: tools/crosscheck/drive_<runtime>.py in the runtime's venv
    oracle_side.py  the oracle's side: the same steps through the peer profile's simulator
    compare.py      the first differing observation
    hypotheses.py   the known causes, each one switch on a copy of the oracle (classification only)
    classify.py     the smallest set of causes that explains a disagreement
    shrink.py       a disagreeing stream shrunk to a minimal one of the same class
    run.py          streams through both sides, findings per class
    report.py       the table row, result.json, the minimal streams as parity-style entries
    speed.py        the runtime's manager and the oracle timed on one stream

The kit never imports a runtime: each runs in its own process and venv under
.kvconform-cache/crosscheck/ (tools/crosscheck/install.sh).
"""
