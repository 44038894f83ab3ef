"""``transformer_block``: one pre-norm decoder block in plain torch, prefill or decode.

LayerNorm → QKV projection → causal SDPA → output projection → residual → LayerNorm → MLP with GELU → residual.
``prefill``: batch × seq_len tokens; ``decode``: one new token per sequence attending to a preallocated KV cache of
kv_len positions (its K/V are written into the cache's last position, then the token attends to all kv_len).
"""
from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from ._base import BATCH_RANGE, Knob, Workload
from ._train import TRAIN_KNOBS, TRAINING, forward_or_train
from .attention import _pairs

BLOCK_MODES = ("prefill", "decode")


def block_hidden(v: Mapping) -> int:
    return max(1, round(v["mlp_ratio"] * v["d_model"]))


def _block_build(torch, v, device, dtype):
    nn, F = torch.nn, torch.nn.functional
    d, H, B = v["d_model"], v["heads"], v["batch"]
    hd, h = d // H, block_hidden(v)
    decode = v["mode"] == "decode"
    S = 1 if decode else v["seq_len"]
    kw = dict(device=device, dtype=dtype)

    class Block(nn.Module):
        """Pre-norm decoder block: x + proj(attn(ln1(x))), then + fc2(gelu(fc1(ln2(x))))."""

        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d, **kw), nn.LayerNorm(d, **kw)
            self.qkv, self.proj = nn.Linear(d, 3 * d, **kw), nn.Linear(d, d, **kw)
            self.fc1, self.fc2 = nn.Linear(d, h, **kw), nn.Linear(h, d, **kw)

        def heads(self, x):
            # (B, S, d) → q, k, v of (B, H, S, hd)
            return self.qkv(self.ln1(x)).view(B, S, 3, H, hd).permute(2, 0, 3, 1, 4).unbind(0)

        def finish(self, x, a):
            x = x + self.proj(a.transpose(1, 2).reshape(B, S, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

        def prefill(self, x):
            q, k, w = self.heads(x)
            return self.finish(x, F.scaled_dot_product_attention(q, k, w, is_causal=True))

        def decode(self, x, k_cache, v_cache):
            q, k, w = self.heads(x)
            # the new token's K/V go into the cache's last position, then it attends to all kv_len positions
            k_cache[:, :, -1:].copy_(k)
            v_cache[:, :, -1:].copy_(w)
            return self.finish(x, F.scaled_dot_product_attention(q, k_cache, v_cache))

    torch.manual_seed(0)
    block = Block()
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn((B, S, d), generator=g, **kw)
    if not decode:
        def inner(x):
            return block.prefill(x)
        return forward_or_train(torch, v, device, block, inner, (x,), (B, S, d))
    block.requires_grad_(False)  # decode is inference (train applies to prefill only)
    cache = (B, H, v["kv_len"], hd)
    k_cache = torch.randn(cache, generator=g, **kw)
    v_cache = torch.randn(cache, generator=g, **kw)

    def inner(x, k_cache, v_cache):
        return block.decode(x, k_cache, v_cache)

    return inner, (x, k_cache, v_cache)


def _block_tokens(v):
    return v["batch"] * (1 if v["mode"] == "decode" else v["seq_len"])


def _block_weights(v):
    d, h = v["d_model"], block_hidden(v)
    return 4 * d * d + 4 * d + 2 * d * h + h + d + 4 * d  # qkv, proj (+ biases), fc1, fc2 (+ biases), 2 LayerNorms


def _block_flops(v):
    d, h, T = v["d_model"], block_hidden(v), _block_tokens(v)
    proj = 2 * T * (3 * d * d + d * d + 2 * d * h)
    if v["mode"] == "decode":
        pairs = v["batch"] * v["kv_len"]
    else:
        pairs = v["batch"] * _pairs(v["seq_len"], v["seq_len"], True)
    return proj + 4 * pairs * d  # QKᵀ and PV: 2·head_dim each per pair, summed over heads = 4·d


def _block_cache(v):
    return 2 * v["batch"] * v["kv_len"] * v["d_model"] if v["mode"] == "decode" else 0


def _block_bytes(v, e):
    return e * (_block_weights(v) + 2 * _block_tokens(v) * v["d_model"] + _block_cache(v))


def _block_memory(v, e):
    T, d, h = _block_tokens(v), v["d_model"], block_hidden(v)
    acts = T * (8 * d + h)  # x, ln, qkv (3d), attention out, residuals ... a generous count of what is alive
    return e * (_block_weights(v) + acts + _block_cache(v))


def _block_cross_check(v, prefix):
    if v["train"] and v["mode"] == "decode":
        raise ConfigError(prefix + "train", True, "false when mode is 'decode' (decode is inference against a KV "
                          "cache; train a prefill block)")
    if v["d_model"] % v["heads"]:
        raise ConfigError(prefix + "heads", v["heads"], f"a divisor of d_model {v['d_model']}")


TRANSFORMER_BLOCK = Workload(
    "transformer_block", "one pre-norm decoder block in torch (LayerNorm, QKV projection, causal SDPA, output "
    "projection, GELU MLP), prefill or decode with a KV cache",
    (Knob("mode", "choice", "prefill", "prefill: batch × seq_len tokens at once; decode: one new token per "
          "sequence attending to a KV cache of kv_len positions", choices=BLOCK_MODES, tag=""),
     Knob("batch", "int", 4, "sequences", range=BATCH_RANGE, tag="b"),
     Knob("seq_len", "int", 128, "tokens per sequence", range=(1, 1 << 20), tag="s",
          when=("mode", "prefill")),
     Knob("kv_len", "int", 1024, "positions in the KV cache, the new token's included",
          range=(1, 1 << 20), tag="kv", when=("mode", "decode")),
     Knob("d_model", "int", 512, "model width", range=(1, 65536), tag="d"),
     Knob("heads", "int", 8, "attention heads (must divide d_model)", range=(1, 1024), tag="h"),
     Knob("mlp_ratio", "float", 4.0, "MLP hidden width ÷ d_model", range=(0.0625, 64.0), tag="r"), *TRAIN_KNOBS),
    ("seq_len", "kv_len"), _block_build, training=TRAINING, parameters=lambda v: (_block_weights(v), 12),
    kind=lambda v: "decode" if v["mode"] == "decode" else "forward", flops=_block_flops, bytes_=_block_bytes,
    memory=_block_memory, cross_check=_block_cross_check)
