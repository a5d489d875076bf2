"""`python -m conformance.numerics`: the former name of `python -m numerical_reference`.

Kept for one release, so that a manifest naming it as its reference command (spec/RUNNING.md
section 5) still works; each start prints a one-line deprecation note on stderr.
"""
from __future__ import annotations

import sys

from numerical_reference.__main__ import main

if __name__ == "__main__":
    print("python -m conformance.numerics is deprecated: use python -m numerical_reference", file=sys.stderr)
    sys.exit(main())
