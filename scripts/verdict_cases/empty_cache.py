"""A training step of an MLP (bf16, batch 256) that ends with ``torch.cuda.empty_cache()``, as a loop written to
"save memory" does: the caching allocator hands its free blocks back to the driver every step and asks for them
again in the next one (``cudaFree`` and ``cudaMalloc`` in every step).

``make_step``: with the call; ``kept``: the same step without it (the allocator keeps its blocks)."""
import torch


def _build(device, dtype, empty):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 8192), torch.nn.GELU(),
                                torch.nn.Linear(8192, 2048)).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(256, 2048, device=device, dtype=dtype)

    def step(model, opt, x):
        loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if empty and device == "cuda":
            torch.cuda.empty_cache()
        return loss

    return step, (model, opt, x)


def make_step(device, dtype):
    return _build(device, dtype, empty=True)


def kept(device, dtype):
    return _build(device, dtype, empty=False)
