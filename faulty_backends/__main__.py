"""`python -m faulty_backends VARIANT infer ...`: one faulty variant behind the
command contract of spec/RUNNING.md section 2, for judging it through `--backend command`
(a fixed engine, a wrapper script, another machine).

    python -m faulty_backends partial-page-reuse infer --engineDir D --inputFile IN ...

It is the bundled backend's own CLI (`python -m gpu_backend infer`) with the variant's runtime in
place of `gpu_backend.Runtime`; every flag and exit code is the bundled CLI's.
"""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from . import CATALOGUE
    if not argv or argv[0] not in CATALOGUE:
        print(f"faulty_backends: error: the first argument must be a variant ({', '.join(CATALOGUE)})",
              file=sys.stderr)
        return 2
    import gpu_backend.runtime
    from gpu_backend import cli
    gpu_backend.runtime.Runtime = CATALOGUE[argv[0]].factory   # what the CLI's `infer` instantiates
    return cli.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
