"""Real training-step and causal-LM traces on a GPU, with plain torch.profiler (no profiling_core), as ground truth
for the training and LLM analyses: what torch and transformers record for the phases of a training step
(``autograd::engine::evaluate_function``, ``Optimizer.step#…``), for Adam foreach vs fused, and for a Llama-style
model in prefill, decode (dynamic vs static cache, eager vs torch.compile reduce-overhead) and train.

Writes ``<out>/<case>.json.gz`` (the trace), ``<out>/<case>.txt`` (the profiler's table) and ``<out>/facts.json``
(versions, timings per step by CUDA events, the APIs that exist). Run: ``python3 scripts/gpu_train_llm.py OUT``.
"""
from __future__ import annotations

import gzip
import inspect
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
OUT.mkdir(parents=True, exist_ok=True)
FACTS: dict = {"torch": torch.__version__, "cuda": torch.version.cuda, "cases": {}}
DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cuda":
    FACTS["device"] = torch.cuda.get_device_name(0)
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def profiled(case: str, step, steps: int = 3, warmup: int = 3):
    """Profile ``step()`` for ``steps`` active steps after ``warmup`` calls; time each active step with CUDA events."""
    try:
        for _ in range(warmup):
            step()
        if DEV == "cuda":
            torch.cuda.synchronize()
        times = []
        raw = OUT / f"{case}.json"
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else []),
                     schedule=schedule(wait=0, warmup=1, active=steps), record_shapes=True,
                     on_trace_ready=lambda p: (p.export_chrome_trace(str(raw)), (OUT / f"{case}.txt").write_text(
                         p.key_averages().table(sort_by="self_cuda_time_total" if DEV == "cuda"
                                                else "self_cpu_time_total", row_limit=25)))) as prof:
            for _ in range(1 + steps):
                t0 = time.perf_counter()
                step()
                if DEV == "cuda":
                    torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e6)
                prof.step()
        with open(raw, "rb") as f, gzip.open(f"{raw}.gz", "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
        raw.unlink()
        FACTS["cases"][case] = {"ok": True, "wall_us_per_step_synced": times[1:]}
        print(case, "ok", [round(t) for t in times[1:]], flush=True)
    except Exception as exc:  # one failing case must not lose the others
        FACTS["cases"][case] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                "trace": traceback.format_exc()[-3000:]}
        print(case, "FAILED", exc, flush=True)


def mlp_train(opt: str, impl: str, dtype_ctx: str, compile_: bool = False, d: int = 2048, batch: int = 2048):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)).to(DEV)
    kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    optim = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[opt](
        model.parameters(), lr=1e-3, **kw)
    x = torch.randn(batch, d, device=DEV)
    y = torch.randn(batch, d, device=DEV)
    fwd = torch.compile(model) if compile_ else model

    def step():
        with record_function("train::forward"):
            if dtype_ctx == "bf16":
                with torch.autocast(DEV, dtype=torch.bfloat16):
                    loss = torch.nn.functional.mse_loss(fwd(x), y)
            else:
                loss = torch.nn.functional.mse_loss(fwd(x), y)
        with record_function("train::backward"):
            loss.backward()
        with record_function("train::optimizer"):
            optim.step()
        with record_function("train::zero_grad"):
            optim.zero_grad(set_to_none=True)
    return step


def llm(mode: str, cache: str = "dynamic", compile_mode: str | None = None, layers: int = 4, hidden: int = 1024,
        heads: int = 16, kv_heads: int = 4, vocab: int = 32000, seq: int = 128, new_tokens: int = 16, batch: int = 4):
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    FACTS["transformers"] = transformers.__version__
    torch.manual_seed(0)
    cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, intermediate_size=4 * hidden, vocab_size=vocab,
                      max_position_embeddings=seq + new_tokens + 8)
    model = LlamaForCausalLM(cfg).to(DEV, torch.bfloat16 if mode != "train" else torch.float32)
    ids = torch.randint(0, vocab, (batch, seq), device=DEV)
    if mode == "prefill":
        model.eval()

        def step():
            with torch.no_grad(), record_function("llm::prefill"):
                model(ids, use_cache=False)
        return step
    if mode == "train":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=DEV == "cuda")

        def step():
            with record_function("train::forward"), torch.autocast(DEV, dtype=torch.bfloat16):
                loss = model(ids, labels=ids).loss
            with record_function("train::backward"):
                loss.backward()
            with record_function("train::optimizer"):
                optim.step()
            with record_function("train::zero_grad"):
                optim.zero_grad(set_to_none=True)
        return step
    # decode: prefill once per step into a fresh cache, then new_tokens single-token forwards
    model.eval()
    from transformers import DynamicCache, StaticCache
    FACTS["static_cache_signature"] = str(inspect.signature(StaticCache.__init__))
    FACTS["dynamic_cache_signature"] = str(inspect.signature(DynamicCache.__init__))
    fwd = torch.compile(model, mode=compile_mode, fullgraph=False) if compile_mode else model

    def make_cache():
        if cache == "static":
            try:
                return StaticCache(config=cfg, max_batch_size=batch, max_cache_len=seq + new_tokens,
                                   device=DEV, dtype=torch.bfloat16)
            except TypeError:
                return StaticCache(config=cfg, max_cache_len=seq + new_tokens)
        return DynamicCache()

    def step():
        with torch.no_grad():
            kv = make_cache()
            with record_function("llm::prefill"):
                out = model(ids, past_key_values=kv, use_cache=True,
                            cache_position=torch.arange(seq, device=DEV))
            tok = out.logits[:, -1:].argmax(-1)
            for t in range(new_tokens):
                with record_function("decode::token"):
                    out = fwd(tok, past_key_values=kv, use_cache=True,
                              cache_position=torch.tensor([seq + t], device=DEV))
                    tok = out.logits[:, -1:].argmax(-1)
    return step


def main():
    t0 = time.time()
    tiny = os.environ.get("PROBE_TINY") == "1"  # a smoke run on a CPU: small sizes, no compile
    m = {"d": 64, "batch": 64} if tiny else {}
    lm = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "vocab": 256, "seq": 16, "new_tokens": 4} if tiny \
        else {}
    profiled("mlp_train_adam_foreach_bf16", mlp_train("adam", "foreach", "bf16", **m))
    profiled("mlp_train_adam_fused_bf16", mlp_train("adam", "fused", "bf16", **m))
    profiled("mlp_train_adam_forloop_fp32", mlp_train("adam", "forloop", "fp32", **m))
    if not tiny:
        profiled("mlp_train_adamw_fused_bf16_compile", mlp_train("adamw", "fused", "bf16", compile_=True))
    profiled("llm_prefill", llm("prefill", **lm))
    profiled("llm_decode_dynamic_eager", llm("decode", "dynamic", **lm))
    profiled("llm_decode_static_eager", llm("decode", "static", **lm))
    if not tiny:
        profiled("llm_decode_static_compile_ro", llm("decode", "static", "reduce-overhead"), warmup=4)
        profiled("llm_decode_dynamic_compile_default", llm("decode", "dynamic", "default"), warmup=3)
    profiled("llm_train", llm("train", **lm))
    FACTS["total_s"] = round(time.time() - t0, 1)
    (OUT / "facts.json").write_text(json.dumps(FACTS, indent=1))


if __name__ == "__main__":
    main()
