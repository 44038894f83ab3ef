"""``scaled_dot_product_attention`` given an explicit mask where ``is_causal=True`` would do: (8, 16, 2048, 128)
q, k, v, the causal lower triangle passed as ``attn_mask`` (``make_step``: a boolean mask; ``additive``: the same as
an additive float mask of 0 and -inf). Flash takes no explicit mask, so torch picks another backend."""
import torch

SHAPE = (8, 16, 2048, 128)


def _masked(device, dtype, additive):
    torch.manual_seed(0)
    q, k, v = (torch.randn(SHAPE, device=device, dtype=dtype) for _ in range(3))
    keep = torch.ones(SHAPE[2], SHAPE[2], device=device, dtype=torch.bool).tril()
    mask = torch.zeros(keep.shape, device=device, dtype=dtype).masked_fill(~keep, float("-inf")) if additive else keep

    def step(q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return step, (q, k, v, mask)


def make_step(device, dtype):
    return _masked(device, dtype, additive=False)


def additive(device, dtype):
    return _masked(device, dtype, additive=True)
