"""``causal_lm``: a Hugging Face causal language model built from its config with random weights, in three modes.

The model is transformers' ``LlamaForCausalLM`` (``family`` llama: RMSNorm, rotary positions, grouped-query
attention with ``kv_heads`` key/value heads, a gated SiLU MLP, an untied LM head) or ``GPT2LMHeadModel`` (``family``
gpt2: LayerNorm, learned positions, GELU MLP, the LM head tied to the embedding), built from a ``LlamaConfig`` /
``GPT2Config`` whose size knobs are the config's own (``layers``, ``hidden``, ``heads``, ``kv_heads``, ``vocab``,
``intermediate``) and initialised by the model's own init under ``torch.manual_seed(0)``.  Nothing is downloaded:
only config classes are used, with ``HF_HUB_OFFLINE=1``.  transformers is an optional extra (``pip install -e
'.[llm]'``); without it the run fails with a ``workload`` error saying so.

One profiler step (inside ``record_function("causal_lm")``) is, by ``mode``:

- ``prefill``: one forward over a batch × seq_len prompt, no KV cache (``use_cache=False``), under ``no_grad``.
- ``decode``: a prefill of the prompt into a fresh KV cache (``record_function("decode::prefill")``), then
  ``new_tokens`` forwards of one token each, ``model(ids, past_key_values=cache, use_cache=True,
  cache_position=...)``, each inside ``record_function("decode::token")`` and fed the argmax of the previous
  logits (greedy).  ``cache``: ``dynamic`` (a ``DynamicCache`` that grows one position per token, so every token's
  forward sees new shapes) or ``static`` (a ``StaticCache`` of seq_len + new_tokens positions allocated once and
  reset each step: the same shapes every token, what torch.compile's CUDA graphs need).
- ``train``: ``train::forward`` (the forward with ``labels`` = the prompt, the model's shifted cross-entropy),
  ``train::backward`` (``loss.backward()``), ``train::optimizer`` (``optimizer.step()``), ``train::zero_grad``
  (``zero_grad(set_to_none=True)``): one optimizer step per profiler step, the training step every nn workload
  runs (``_train.train_step``).  Its knobs are the nn workloads' own train knobs (:data:`LM_TRAINING`, a
  ``_train.Training`` switched by ``mode`` = ``train``): ``optimizer``, ``impl``, ``autocast`` (fp16 with a
  GradScaler; needs dtype fp32) and ``log_loss``, checked and named the same way, applying only in train mode.  The
  parameters are in the run's dtype (pure bf16 training under bf16: no fp32 master weights).

Module names in the trace (knob ``module_ranges``, on by default).  In eager runs every module down to the
children of a decoder layer gets a ``record_function`` named by its name in ``model.named_modules()``: the names
with at most one part more than a
decoder layer's own (``model.layers.3`` and ``model.layers.3.self_attn``, ``model.layers.3.mlp``,
``model.layers.3.input_layernorm``, but not ``model.layers.3.self_attn.q_proj``; for gpt2 ``transformer.h.3``,
``transformer.h.3.attn``), the model's other modules above them (``model``, ``model.embed_tokens``, ``model.norm``,
``lm_head``; ``transformer.wte``, ``transformer.ln_f`` ...) and not the ``ModuleList`` of the layers, which is never
called.  The ranges come from forward pre/post hooks, so backward ops do not sit in them.  Under torch.compile the
hooks are removed and ``model.forward`` is what is compiled (as transformers' docs compile it: ``model.forward =
torch.compile(model.forward, ...)``; in decode only the per-token forward is, the prompt's prefill runs eager, as
static-cache generation does), so the trace shows the compiled region per forward and the ``decode::token`` /
``train::*`` ranges around it, not the modules (a compiled graph has no module boundaries at run time).  With
``module_ranges`` off no hook is registered: the step runs the model's plain code, as a loop without the app would.
The hooks cost eager CPU time (two Python calls and a profiler range per module and forward;
:data:`MODULE_RANGES_HELP` says how much was measured), which is the price of the names.

FLOPs count the matrix products (2·M·K·N each: every linear layer and the LM head, attention's QKᵀ and PV over the
causal pairs); a train step counts three times its forward (the backward's two products per forward one).
"""
from __future__ import annotations

import inspect
import os

from ..errors import ConfigError, WorkerError
from ._base import BATCH_RANGE, Knob, Workload
from .attention import _pairs
from ._train import Training, train_step

LM_FAMILIES = ("llama", "gpt2")
LM_MODES = ("prefill", "decode", "train")
LM_CACHES = ("dynamic", "static")
TRANSFORMERS_MISSING = "the causal_lm workload needs transformers: pip install -e '.[llm]'"
LM_TRAINING = Training(("mode", "train"))
"""How ``mode=train`` trains: the nn workloads' train knobs (``optimizer``, ``impl``, ``autocast``, ``log_loss``),
applying when ``mode`` is ``train``."""
MODULE_RANGES_HELP = (
    "a record_function range per module (model.layers.0.self_attn ...), from forward hooks, so the trace names the "
    "modules. They cost eager CPU time: under the profiler on a CPU, a 4-layer llama (hidden 256, 32 tokens) took "
    "1.13x the time of the plain model per prefill step and 1.18x per decode step (both in one process, "
    "interleaved). Off: the model's plain code, for timings; the run's name says no-module-ranges")

LM_RANGES = ("decode::prefill", "decode::token", "train::forward", "train::backward", "train::optimizer",
             "train::zero_grad")
"""The ``record_function`` ranges a causal_lm step opens (besides its module names)."""


def lm_kv_heads(v) -> int:
    """Key/value heads: the knob, or ``heads`` (no grouping) where it is None or the family is gpt2."""
    return v["heads"] if v["family"] == "gpt2" or v["kv_heads"] is None else v["kv_heads"]


def lm_intermediate(v) -> int:
    """The MLP's inner width: the knob, or 4 × hidden where it is None."""
    return 4 * v["hidden"] if v["intermediate"] is None else v["intermediate"]


def _positions(v) -> int:
    return v["seq_len"] + (v["new_tokens"] if v["mode"] == "decode" else 0)


def module_range_names(named_modules) -> list[str]:
    """The module names that get a ``record_function`` (the rule in this module's docstring), from
    ``(name, module)`` pairs in ``named_modules()`` order: the decoder layers are the items of a ``ModuleList``
    (``model.layers.<i>``); a name is kept when it has at most one part more than a layer's name and is not a
    ``ModuleList``, nor the root (named "")."""
    pairs = list(named_modules)
    lists = {n for n, m in pairs if type(m).__name__ == "ModuleList"}
    layer_parts = [n.count(".") + 1 for n, _m in pairs if n.rpartition(".")[0] in lists and n.rpartition(".")[0]]
    most = (max(layer_parts) if layer_parts else 1) + 1
    return [n for n, _m in pairs if n and n not in lists and n.count(".") + 1 <= most]


def _config(transformers, v):
    d, H, L = v["hidden"], v["heads"], v["layers"]
    if v["family"] == "gpt2":
        return transformers.GPT2Config(
            vocab_size=v["vocab"], n_positions=_positions(v), n_embd=d, n_layer=L, n_head=H,
            n_inner=lm_intermediate(v), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=True,
            bos_token_id=0, eos_token_id=0)
    return transformers.LlamaConfig(
        vocab_size=v["vocab"], hidden_size=d, intermediate_size=lm_intermediate(v), num_hidden_layers=L,
        num_attention_heads=H, num_key_value_heads=lm_kv_heads(v), max_position_embeddings=_positions(v),
        use_cache=True, bos_token_id=0, eos_token_id=0)


def _static_cache(transformers, torch, config, batch: int, length: int, device, dtype):
    """A ``StaticCache`` of ``length`` positions: transformers 5 takes (config, max_cache_len) and allocates at the
    first update; 4.x also takes the batch, device and dtype."""
    params = inspect.signature(transformers.StaticCache.__init__).parameters
    kw = {"config": config, "max_cache_len": length}
    if "max_batch_size" in params:
        kw.update(max_batch_size=batch, device=device, dtype=dtype)
    return transformers.StaticCache(**kw)


def _lm_build(torch, v, device, dtype):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise WorkerError("workload", TRANSFORMERS_MISSING) from None
    from torch.profiler import record_function

    config = _config(transformers, v)
    torch.manual_seed(0)
    cls = transformers.GPT2LMHeadModel if v["family"] == "gpt2" else transformers.LlamaForCausalLM
    model = cls(config).to(device=device, dtype=dtype)
    B, S, N, mode = v["batch"], v["seq_len"], v["new_tokens"], v["mode"]
    g = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, v["vocab"], (B, S), generator=g, device=device)

    hooks, named = [], set(module_range_names(model.named_modules())) if v["module_ranges"] else set()
    for name, module in model.named_modules():
        if name in named:
            hooks.extend(_range_hooks(record_function, name, module))

    if mode == "train":  # the shared training step (``_train``), with the train knobs
        model.train()
        step = train_step(torch, lambda ids: model(input_ids=ids, labels=ids).loss, model.parameters(),
                          LM_TRAINING.step_knobs(v), device)
    else:
        model.eval().requires_grad_(False)
        if mode == "prefill":
            def step(ids):
                with torch.no_grad():
                    return model(input_ids=ids, use_cache=False).logits
        else:
            static = v["cache"] == "static"
            cache = _static_cache(transformers, torch, config, B, S + N, device, dtype) if static else None
            positions = torch.arange(S + N, device=device)
            params = inspect.signature(cls.forward).parameters
            cache_kw = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x
            at = "cache_position" in params  # 4.x takes the positions; 5.x reads them from the cache

            def forward(x, kv, lo, hi, fn=None):
                return (fn or model)(input_ids=x, use_cache=True, **{cache_kw: kv},
                                     **({"cache_position": positions[lo:hi]} if at else {}))

            def step(ids):
                with torch.no_grad():
                    kv = cache if static else transformers.DynamicCache()
                    if static:
                        kv.reset()
                    with record_function("decode::prefill"):
                        out = forward(ids, kv, 0, S)
                    for t in range(N):
                        with record_function("decode::token"):
                            out = forward(out.logits[:, -1:].argmax(-1), kv, S + t, S + t + 1,
                                          compiled.get("token"))
                    return out.logits

    compiled: dict = {}

    def compile_with(compile):
        for h in hooks:  # a compiled graph has no module boundaries at run time
            h.remove()
        hooks.clear()
        if mode == "decode":  # the per-token forward, as the transformers docs compile it; the prompt runs eager
            compiled["token"] = compile(model.forward)  # (the prefill under reduce-overhead crashed Inductor's
        else:                                           # Triton launcher on the H200, torch 2.11)
            model.forward = compile(model.forward)
        return step

    step.compile_with = compile_with
    return step, (ids,)


def _range_hooks(record_function, name: str, module):
    """A forward pre-hook that opens ``record_function(name)`` and a forward hook that closes it."""
    open_ = []

    def pre(_module, _args):
        rf = record_function(name)
        rf.__enter__()
        open_.append(rf)

    def post(_module, _args, _out):
        if open_:
            open_.pop().__exit__(None, None, None)

    return [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]


# --- sizes -----------------------------------------------------------------------------------------------------------

def _layer_matmul_weights(v) -> int:
    """Weights of one decoder layer's matrix products (biases left out)."""
    d, inter = v["hidden"], lm_intermediate(v)
    if v["family"] == "gpt2":
        return 3 * d * d + d * d + 2 * d * inter
    kvd = lm_kv_heads(v) * (d // v["heads"])
    return 2 * d * d + 2 * d * kvd + 3 * d * inter


def lm_parameters(v) -> int:
    """Every parameter of the model, by hand from the config (checked against ``model.parameters()``)."""
    d, inter, L, V = v["hidden"], lm_intermediate(v), v["layers"], v["vocab"]
    if v["family"] == "gpt2":  # c_attn, c_proj, c_fc, mlp c_proj with biases, 2 LayerNorms; wte (tied), wpe, ln_f
        layer = _layer_matmul_weights(v) + 3 * d + d + inter + d + 4 * d
        return L * layer + V * d + _positions(v) * d + 2 * d
    return L * (_layer_matmul_weights(v) + 2 * d) + 2 * V * d + d  # 2 RMSNorms per layer; embed, lm_head, norm


def lm_parameter_tensors(v) -> int:
    """The parameter tensors of the model (``len(list(model.parameters()))``; gpt2's tied LM head is the
    embedding's): llama 9 per layer (q, k, v, o, gate, up, down, 2 RMSNorms) + embedding, LM head, final norm;
    gpt2 12 per layer (4 linear layers and 2 LayerNorms, each weight and bias) + wte, wpe, ln_f (2)."""
    return v["layers"] * (12 if v["family"] == "gpt2" else 9) + (4 if v["family"] == "gpt2" else 3)


def _forward_flops(v, tokens: int, pairs: int) -> int:
    """One forward's matrix products over ``tokens`` tokens whose attention covers ``pairs`` query-key pairs."""
    return 2 * tokens * (v["layers"] * _layer_matmul_weights(v) + v["vocab"] * v["hidden"]) \
        + 4 * v["layers"] * pairs * v["hidden"]


def _lm_flops(v):
    B, S, N = v["batch"], v["seq_len"], v["new_tokens"]
    prompt = _forward_flops(v, B * S, B * _pairs(S, S, True))
    if v["mode"] == "train":
        return 3 * prompt
    if v["mode"] == "prefill":
        return prompt
    return prompt + sum(_forward_flops(v, B, B * (S + t + 1)) for t in range(N))


def _cache_elements(v) -> int:
    return 2 * v["layers"] * v["batch"] * _positions(v) * lm_kv_heads(v) * (v["hidden"] // v["heads"])


def _lm_bytes(v, e):
    """The weights read once per forward, the prompt's logits written, and in decode the cache read by each token."""
    P, B, S, N, V = lm_parameters(v), v["batch"], v["seq_len"], v["new_tokens"], v["vocab"]
    if v["mode"] != "decode":
        return e * (P + B * S * V) * (3 if v["mode"] == "train" else 1)
    per_pos = _cache_elements(v) // max(1, _positions(v))
    return e * ((1 + N) * P + B * (S + N) * V + sum((S + t + 1) * per_pos for t in range(N)))


def _lm_memory(v, e):
    P, B, S, d, V, L = (lm_parameters(v), v["batch"], v["seq_len"], v["hidden"], v["vocab"], v["layers"])
    T = B * S
    acts = T * L * (12 * d + 3 * lm_intermediate(v)) + 3 * T * V  # a generous count of what the forward keeps alive
    if v["mode"] == "train":  # the weights and activations (the loss upcasts the logits to fp32); the gradients
        return e * (P + acts) + 4 * T * V  # and the optimizer state are added by the one rule (Training.state_bytes)
    return e * (P + T * (8 * d + 2 * V) + _cache_elements(v))


def _lm_cross_check(v, prefix):
    d, H = v["hidden"], v["heads"]
    if d % H:
        raise ConfigError(prefix + "heads", H, f"a divisor of hidden {d}")
    if v["family"] == "llama":
        if (d // H) % 2:
            raise ConfigError(prefix + "heads", H, f"a divisor of hidden {d} that leaves an even head size (llama's "
                                                    f"rotary embedding turns pairs of dimensions; {d} ÷ {H} = "
                                                    f"{d // H})")
        if v["kv_heads"] is not None and H % v["kv_heads"]:
            raise ConfigError(prefix + "kv_heads", v["kv_heads"], f"a divisor of heads {H}")


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
"""The torch.compile modes that replay CUDA graphs on a GPU."""


def _lm_check_compile(v, compile: str, device: str, prefix: str) -> None:
    """A dynamic KV cache cannot decode under CUDA graphs: the cache's tensors are outputs of the graph that the
    next token's replay overwrites (torch raises "accessing tensor output of CUDAGraphs that has been overwritten
    by a subsequent run"; seen on an H200, torch 2.11, transformers 5.17). The static cache is what the
    transformers docs give torch.compile; on the CPU no graph is captured, so every mode runs."""
    if v["mode"] == "decode" and v["cache"] == "dynamic" and compile in CUDA_GRAPH_MODES and device != "cpu":
        raise ConfigError("compile", compile,
                          f"off, default or max-autotune-no-cudagraphs with {prefix}cache 'dynamic' on a GPU (a "
                          "dynamic KV cache's tensors are CUDA graph outputs that the next token's replay "
                          f"overwrites; {prefix}cache 'static' decodes under CUDA graphs)")


CAUSAL_LM = Workload(
    "causal_lm", "a Hugging Face causal LM (Llama or GPT-2) built from its config with random weights: prefill, "
    "decode with a KV cache (dynamic or static), or a training step",
    (Knob("family", "choice", "llama", "llama: LlamaForCausalLM (RMSNorm, rotary, grouped-query attention, gated "
          "MLP); gpt2: GPT2LMHeadModel (LayerNorm, learned positions, GELU MLP)", choices=LM_FAMILIES, tag=""),
     Knob("mode", "choice", "prefill", "prefill: one forward over the prompt; decode: prefill, then new_tokens "
          "one-token forwards with the KV cache; train: forward with labels, backward, an optimizer step (the "
          "train knobs)",
          choices=LM_MODES, tag=""),
     Knob("batch", "int", 1, "sequences", range=BATCH_RANGE, tag="b"),
     Knob("seq_len", "int", 128, "prompt tokens per sequence", range=(1, 1 << 16), tag="s"),
     Knob("new_tokens", "int", 16, "tokens generated per step, one forward each", range=(1, 4096), tag="n",
          when=("mode", "decode")),
     Knob("cache", "choice", "dynamic", "the KV cache: dynamic grows a token at a time (new shapes every token); "
          "static is allocated once at seq_len + new_tokens (fixed shapes, for torch.compile and CUDA graphs)",
          choices=LM_CACHES, tag="", when=("mode", "decode")),
     Knob("layers", "int", 4, "decoder layers", range=(1, 256), tag="L"),
     Knob("hidden", "int", 512, "model width (hidden size)", range=(2, 65536), tag="d"),
     Knob("heads", "int", 8, "attention heads (must divide hidden)", range=(1, 1024), tag="h"),
     Knob("kv_heads", "int", None, "key/value heads (grouped-query attention; must divide heads); none (empty in "
          "the form): heads", range=(1, 1024), optional=True, tag="kv", when=("family", "llama")),
     Knob("intermediate", "int", None, "the MLP's inner width; none (empty in the form): 4 × hidden",
          range=(1, 1 << 18), optional=True, tag="i"),
     Knob("vocab", "int", 32000, "vocabulary size", range=(2, 1 << 20), tag="v"),
     *LM_TRAINING.knobs,
     Knob("module_ranges", "bool", True, MODULE_RANGES_HELP)),
    ("new_tokens", "seq_len"), _lm_build, flops=_lm_flops, bytes_=_lm_bytes, memory=_lm_memory,
    cross_check=_lm_cross_check, training=LM_TRAINING, check_compile=_lm_check_compile,
    parameters=lambda v: (lm_parameters(v), lm_parameter_tensors(v)),
    kind=lambda v: "decode" if v["mode"] == "decode" else "forward",
    name_suffix=lambda v: [] if v["module_ranges"] else ["no-module-ranges"])
