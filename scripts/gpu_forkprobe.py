"""Which import poisons fork for CUDA?  Prints, after each step, whether a forked child is in 'bad fork'."""
import os

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")


def probe(label):
    import torch
    pid = os.fork()
    if pid == 0:
        os._exit(1 if getattr(torch._C, "_cuda_isInBadFork", lambda: False)() else 0)
    _, st = os.waitpid(pid, 0)
    print(label, "bad fork" if os.WEXITSTATUS(st) else "fork ok", flush=True)


import torch  # noqa: E402
probe("torch")
import torch._dynamo  # noqa: E402,F401
probe("torch._dynamo")
import torch.profiler  # noqa: E402,F401
probe("torch.profiler")
import torch._inductor.compile_fx  # noqa: E402,F401
probe("inductor")
torch.cuda.is_available()
probe("is_available (nvml)")
