"""Snapshot slots of recurrent and hybrid checkpoints (CR-HYB-1, CR-HYB-4, CR-HYB-6).

A recurrent slot holds, for every recurrent layer, the state [H, hd, N] and the convolution
state [C, K] in float32: exactly S_r = L_rec * (H*hd*N + C*K) * 4 bytes. A partial-KV slot
holds K and V of the first L % P positions of one page for every attention layer in FP16:
S_p = L_att * G * D * 2 * P * 2 bytes. The number of slots is floor(budget / slot size);
which slot ids are free or held is decided by the cache manager. Slot storage is created on
the device when a slot is first written and dropped when the manager frees the slot, so a
large budget costs memory only for the snapshots actually held.
"""


def recurrent_slot_bytes(cfg) -> int:
    r = cfg["recurrent"]
    layers = cfg["layer_kinds"].count("recurrent")
    b = 4 if r["state_dtype"] == "fp32" else 2
    return layers * (r["num_heads"] * r["head_dim"] * r["state_size"] * b + r["conv_dim"] * r["conv_kernel"] * b)


def partial_kv_slot_bytes(cfg) -> int:
    layers = cfg["layer_kinds"].count("attention")
    return layers * cfg["num_kv_heads"] * cfg["head_dim"] * 2 * cfg["tokens_per_page"] * 2


class SnapshotStore:
    def __init__(self):
        self.recurrent = {}   # slot -> [(state [H, hd, N], conv [C, K]) per recurrent layer]
        self.partial = {}     # slot -> [L_att, 2, r, G, D] tensor, r = L % P positions

    def drop(self, pool: int, slot: int) -> None:
        (self.recurrent if pool == 1 else self.partial).pop(slot, None)
