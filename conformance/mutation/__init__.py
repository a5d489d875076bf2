"""The mutation campaign (`kvconform selftest --mutate PATH...`, docs/mutation.md): kit power that
does not depend on anyone guessing the bug.

Cosmic Ray's operators (the `mutate` extra) change one spot of a module at a time; each change, a
*mutant*, is a faulty backend nobody wrote by hand. A mutant of the bundled backend is judged as
its deployment's user judges a runtime: `kvconform run --fail-fast` in process for the Edge-LLM
side, the bundled server through `kvconform run --backend openai` for each peer profile. A
mutant of the kit itself (`reference/`, the verdicts, adapters, materialization, headline) is
judged by the kit's own tests. Only the cases (or tests) that execute the mutated line run
(`casemap.py`), cheapest first, stopping at the first that catches it.

    operators.py   the operator set and the mutants of a module (Cosmic Ray's operators and positions)
    targets.py     which modules, and which judge each one goes to
    casemap.py     which curated cases (per semantics or peer profile) execute each line
    tree.py        a copy of the kit with one mutant in it
    host.py        the judging process: preloads the heavy libraries once, forks one child per mutant
    judges.py      in a child: the mutant through `kvconform run` or through pytest
    store.py       the resumable store (SQLite): every mutant, its diff and its verdict
    campaign.py    mutants to units, on `--jobs` local processes or Ray (conformance/executors)
    triage.py      the committed triage of the survivors (killed by a case, or equivalent and why)
    report.py      the kill rate per module and the survivors
"""
