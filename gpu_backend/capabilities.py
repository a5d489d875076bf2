"""The capability manifest (spec/RUNNING.md section 1): what this backend really supports."""
import torch

FEATURES = ["lora", "warmup", "hidden_state_output", "sampling", "stop_strings", "kv_dtype_fp8",
            "poison_fresh_pages", "batching"]


def capabilities(device: str = "auto") -> dict:
    """Not declared: tp (one device), spec_decode_eagle, audio_generation. `cuda` is declared
    when the chosen device is a CUDA device."""
    cuda = torch.cuda.is_available() and device in ("auto", "cuda")
    return {
        "format": "kvconform-capabilities-v1",
        "backend": "gpu_backend",
        "version": "1.0.0",
        "semantics_profile": "edge-llm-0.10",
        "tokenizer": ["bytes-v1", "hf"],          # spec/tokenizer.md; spec/hf-tokenizer.md (build --tokenizer)
        "observables": {"per_request_metrics": True, "output_ids": True, "logprobs": True,
                        "prefill_profile": True, "rejection_messages": True},
        "model_kinds": ["attention", "recurrent", "hybrid"],
        "media": ["image", "audio"],
        "features": FEATURES + (["cuda"] if cuda else []),
        "tokens_per_page": "any",
    }
