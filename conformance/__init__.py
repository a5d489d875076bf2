"""kvconform's conformance runner: adapters, cases, verdicts and reports.

It talks to backends only through adapters (spec/RUNNING.md section 1), and takes every
expected count from the oracle in `reference/`.
"""

KIT_VERSION = "2026.11.0"
RUNNING_VERSION = "1.4.0"
