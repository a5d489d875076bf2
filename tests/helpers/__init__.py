"""Helpers shared by the kit's tests.

    cases.py              the committed cases, by id (`case`, `ALL_CASES`)
    mutants.py            the oracle with one seeded mistake, as an adapter (`MutantAdapter`)
    html_checks.py        report.html checked in a parser and in chromium
    peer_servers.py       the bundled OpenAI-compatible server, started for the peer suite
    backend.py            the bundled backend's runtime on small engines (`runtime`, `run`, ...)
    np_reference.py       an independent float64 NumPy forward of the bundled model

Stand-in executables, run by path as a backend command (they import the installed kit):

    fake_llm_inference.py an `llm_inference` behind the command contract, misbehaving on request
    edge_llm_stand_in.py  Edge-LLM's `llm_inference` as it prints on an Edge-LLM engine folder
    text_only_backend.py  the bundled CLI writing no `output_ids`, as Edge-LLM's does
"""
from pathlib import Path

HELPERS = Path(__file__).resolve().parent
"""This folder: the stand-in executables are run by their path here."""
