"""`python -m conformance.faulty_backends`: the former name of `python -m faulty_backends`.

Kept for one release, so that a wrapper script written for it still runs its variant behind the
command contract; each start prints a one-line deprecation note on stderr.
"""
from __future__ import annotations

import sys

if __name__ == "__main__":
    from faulty_backends.__main__ import main
    print("python -m conformance.faulty_backends is deprecated: use python -m faulty_backends", file=sys.stderr)
    sys.exit(main(sys.argv[1:]))
