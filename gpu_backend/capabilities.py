"""The capability manifest (spec/RUNNING.md section 1): what this backend really supports."""
import torch

from .semantics import PROFILES as SEMANTICS

FEATURES = ["lora", "warmup", "hidden_state_output", "sampling", "stop_strings", "kv_dtype_fp8",
            "poison_fresh_pages", "batching", "spec_decode_eagle"]   # EAGLE reuse: spec section 12


def capabilities(device: str = "auto") -> dict:
    """Not declared: tp (one device), audio_generation. `cuda` is declared
    when the chosen device is a CUDA device."""
    cuda = torch.cuda.is_available() and device in ("auto", "cuda")
    return {
        "format": "kvconform-capabilities-v1",
        "backend": "gpu_backend",
        "version": "1.0.0",
        "semantics_profile": list(SEMANTICS),       # the first is the default; --semanticsProfile selects
        "tokenizer": ["bytes-v1", "hf"],          # spec/tokenizer.md; spec/hf-tokenizer.md (build --tokenizer)
        "observables": {"per_request_metrics": True, "output_ids": True, "logprobs": True,
                        "prefill_profile": True, "rejection_messages": True, "record_internals": True,
                        "last_verification_accepted": True},
        "model_kinds": ["attention", "recurrent", "hybrid"],
        "media": ["image", "audio"],
        "features": FEATURES + (["cuda"] if cuda else []),
        "tokens_per_page": "any",
        # its engines are written in the reference layout (spec/engine.md section 5)
        "numerical_reference": {"source": "weights", "layout": "kvconform-weights-v1"},
    }
