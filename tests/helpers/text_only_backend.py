#!/usr/bin/env python3
"""The bundled backend's CLI as a text-only `llm_inference`: `output_ids` dropped from the output
file (KVCONFORM_TEXT_ONLY_DROP names more keys to drop, comma-separated, e.g. `logprobs`), as
Edge-LLM's own `llm_inference` writes it. Arguments are those of `python -m gpu_backend infer`."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    rc = subprocess.call([sys.executable, "-m", "gpu_backend", "infer", *argv])
    out = argv[argv.index("--outputFile") + 1] if "--outputFile" in argv else None
    if out and os.path.isfile(out):
        drop = ["output_ids"] + [k for k in os.environ.get("KVCONFORM_TEXT_ONLY_DROP", "").split(",") if k]
        with open(out, encoding="utf-8") as f:
            doc = json.load(f)
        for r in doc.get("responses", []):
            for key in drop:
                r.pop(key, None)
        with open(out, "w", encoding="utf-8") as f:
            json.dump(doc, f)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
