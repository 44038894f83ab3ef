"""CPU recordings of torch.compile recompiling inside the recorded steps (torch 2.13.0+cpu, one thread):
`python make_compile_recordings.py CASE` for CASE in recompile_mid, recompile_static_every, cold_then_recompile,
recompile_all, warm_recompile_first, tr3_recompile_step1 (and the other cases below, not kept)."""
import sys, os, torch, torch.nn as nn
from torch.profiler import profile, schedule, ProfilerActivity
torch.set_num_threads(1)
OUT = os.path.dirname(os.path.abspath(__file__))  # (the four kept here are then gzip -9'd)
case = sys.argv[1]
torch.manual_seed(0)

def rec(name, step_fns, wait=0, warm=0):
    """step_fns: list of callables, one per step (all recorded, after wait+warm)."""
    n = len(step_fns)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=wait, warmup=warm, active=n - wait - warm, repeat=1),
                 record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(f"{OUT}/{name}.json")) as prof:
        for f in step_fns:
            f(); prof.step()
    p = f"{OUT}/{name}.json"; print(p, os.path.getsize(p))

w = torch.randn(64, 64); b = torch.randn(64)
def mm(x, w, b): return x @ w + b

if case == "recompile_mid":  # warm at 64, shape change at step 2, then another shape
    f = torch.compile(mm)
    for _ in range(3): f(torch.randn(64, 64), w, b)
    xs = [torch.randn(n, 64) for n in (64, 64, 96, 96, 128, 128)]
    rec(name=case, step_fns=[lambda x=x: f(x, w, b) for x in xs])
elif case == "recompile_static_every":  # dynamic=False: every step a new shape
    f = torch.compile(mm, dynamic=False)
    f(torch.randn(8, 64), w, b)
    xs = [torch.randn(16 + 8 * i, 64) for i in range(12)]
    rec(case, [lambda x=x: f(x, w, b) for x in xs])
elif case == "dynamic_true_cold":
    f = torch.compile(mm, dynamic=True)
    xs = [torch.randn(32 + 16 * i, 64) for i in range(5)]
    rec(case, [lambda x=x: f(x, w, b) for x in xs])
elif case == "mark_dynamic_mid":
    f = torch.compile(mm)
    f(torch.randn(64, 64), w, b)
    def s(n, mark=False):
        x = torch.randn(n, 64)
        if mark: torch._dynamo.mark_dynamic(x, 0)
        return f(x, w, b)
    rec(case, [lambda: s(64), lambda: s(64), lambda: s(80, True), lambda: s(100), lambda: s(120)])
elif case.startswith("graph_break"):
    def g(x, w, b):
        y = x @ w
        print("gb", end="") if "print" in case else None
        s = y.sum().item() if "item" in case else 0
        return torch.relu(y + b) * 2 + s
    f = torch.compile(g)
    x = torch.randn(64, 64)
    cold = "cold" in case
    if not cold:
        for _ in range(3): f(x, w, b)
    rec(case, [lambda: f(x, w, b)] * 4)
elif case.startswith("train"):
    opt_name = "adam" if "adam" in case else "sgd"
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
    opt = (torch.optim.Adam(model.parameters(), 1e-3) if opt_name == "adam"
           else torch.optim.SGD(model.parameters(), 1e-2))
    cm = torch.compile(model)
    x = torch.randn(32, 64); y = torch.randn(32, 64)
    def step():
        opt.zero_grad(set_to_none=True)
        loss = ((cm(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    if "warm" in case:
        for _ in range(3): step()
    rec(case, [step] * 4)
elif case.startswith("train_full"):
    pass
elif case == "maxautotune_cold":
    f = torch.compile(mm, mode="max-autotune")
    x = torch.randn(64, 64)
    rec(case, [lambda: f(x, w, b)] * 3)
elif case == "two_fns_lazy":
    f = torch.compile(mm)
    def h(x): return torch.tanh(x) * 3 + 1
    g = torch.compile(h)
    x = torch.randn(64, 64)
    f(x, w, b)
    def s1(): return f(x, w, b)
    def s2(): return g(f(x, w, b))
    rec(case, [s1, s1, s2, s2, s2])
elif case == "recompile_all":  # every recorded step recompiles (limit raised)
    torch._dynamo.config.recompile_limit = 64
    f = torch.compile(mm, dynamic=False)
    f(torch.randn(2, 64), w, b)
    xs = [torch.randn(3 + i, 64) for i in range(6)]
    rec(case, [lambda x=x: f(x, w, b) for x in xs])
elif case == "recompile_small_limit":  # tiny shapes, recompiles until the limit, then eager
    f = torch.compile(mm, dynamic=False)
    f(torch.randn(1, 64), w, b)
    xs = [torch.randn(2 + i, 64) for i in range(10)]
    rec(case, [lambda x=x: f(x, w, b) for x in xs])
elif case in ("tr2_recompile_mid", "tr2_opt_lazy", "tr3_recompile_step1"):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
    opt = torch.optim.Adam(model.parameters(), 1e-3, foreach=False)
    cm = torch.compile(model)
    copt = torch.compile(opt.step)
    def step(n, compiled_opt=False):
        x = torch.randn(n, 64); y = torch.randn(n, 64)
        opt.zero_grad(set_to_none=True)
        loss = ((cm(x) - y) ** 2).mean()
        loss.backward()
        (copt if compiled_opt else opt.step)()
    for _ in range(3): step(32)
    if case == "tr2_recompile_mid":
        rec(case, [lambda n=n: step(n) for n in (32, 32, 48, 48, 48, 48)])
    elif case == "tr3_recompile_step1":
        rec(case, [lambda n=n: step(n) for n in (32, 48, 48)])
    else:
        rec(case, [lambda: step(32), lambda: step(32)] + [lambda: step(32, True)] * 4)
elif case == "cold_then_recompile":
    f = torch.compile(mm)
    xs = [torch.randn(n, 64) for n in (64, 64, 96, 96, 96)]
    rec(case, [lambda x=x: f(x, w, b) for x in xs])
elif case == "warm_recompile_first":
    f = torch.compile(mm)
    for _ in range(3): f(torch.randn(64, 64), w, b)
    xs = [torch.randn(96, 64) for _ in range(4)]
    rec(case, [lambda x=x: f(x, w, b) for x in xs])
