"""LoRA adapter files: read, checked against the model's projections, kept in float32.

An adapter is a safetensors file of `<projection>.lora_A` [r, in] and `.lora_B` [out, r]
pairs over the projections `Model.lora_shapes()` names, one rank for all. A file that does not
fit is refused whole, with the reason, before any request runs (spec/engine.md section 5); the
delta it adds is (x A^T) B^T (layers.lora_linear), and the adapter's name is part of every
page key (CR-ID-3), so what one adapter computed is never reused under another.
"""
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file


def read_adapter(path: str, shapes: dict, device) -> dict:
    """{projection: (A, B)} of the adapter at `path`; ValueError naming what does not fit."""
    try:
        t = load_file(path, device=str(device))
    except (OSError, SafetensorError, ValueError, RuntimeError) as e:
        raise ValueError(f"not a safetensors file ({e})") from None
    out, rank = {}, None
    for k in t:
        base, _, part = k.rpartition(".")
        if base not in shapes or part not in ("lora_A", "lora_B"):
            raise ValueError(f"unexpected tensor {k!r}")
    for proj, (o, i) in shapes.items():
        a, b = t.get(f"{proj}.lora_A"), t.get(f"{proj}.lora_B")
        if a is None and b is None:
            continue
        if a is None or b is None or a.dim() != 2 or b.dim() != 2:
            raise ValueError(f"{proj} needs both lora_A and lora_B matrices")
        r = a.shape[0]
        if tuple(a.shape) != (r, i) or tuple(b.shape) != (o, r) or (rank is not None and r != rank):
            raise ValueError(f"{proj}: shapes {tuple(a.shape)}, {tuple(b.shape)} do not fit ({o}, {i})")
        rank = r
        out[proj] = (a.to(torch.float32), b.to(torch.float32))
    if not out:
        raise ValueError("no adapter tensors")
    return out
