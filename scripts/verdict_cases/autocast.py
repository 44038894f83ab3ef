"""fp32 models run under bf16 autocast, to see what torch records when autocast casts an op's inputs: the op with the
caller's fp32 inputs, and (if autocast lists it) the same op called again inside it with the cast ones.

``make_step``: the conv block of ``conv_block.py`` (Conv2d 3x3 -> BatchNorm -> ReLU, twice); ``mm``: ``torch.mm``
of two 4096² fp32 matrices; ``attention_hd264``: causal ``scaled_dot_product_attention`` of (8, 16, 2048, 264) fp32
query, key and value (flash takes head_dims up to 256). The run's dtype is ignored: the tensors are fp32."""
import torch
import torch.nn.functional as F


def _autocast(device, fn):
    def step(*args):
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
            return fn(*args)
    return step


def make_step(device, dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(64, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
    ).to(device=device).eval().requires_grad_(False)
    return _autocast(device, model), (torch.randn(32, 64, 56, 56, device=device),)


def mm(device, dtype):
    torch.manual_seed(0)
    return _autocast(device, torch.mm), (torch.randn(4096, 4096, device=device),
                                         torch.randn(4096, 4096, device=device))


def attention_hd264(device, dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 16, 2048, 264, device=device) for _ in range(3))
    return _autocast(device, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)), (q, k, v)
