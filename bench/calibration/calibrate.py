"""GPU calibration of the simulated worker's cost model (issue #15).

Measures a Qwen2.5-VL-7B-architecture language model (the Qwen2 7B text tower: hidden 3584, 28 layers,
28 query heads, 4 KV heads, intermediate 18944, vocab 152064) with random bf16 weights:

- prefill time of N new tokens on top of P cached prefix tokens (what one SGLang prefill chunk costs:
  a 32k prompt under --chunked-prefill-size 8192 is four chunks with P = 0, 8k, 16k, 24k);
- decode step time for a batch of B running requests at context C each.

Weights and modules come from transformers' Qwen2ForCausalLM built from a config (no hub access on
the device). The forward is written out here over those modules because transformers' own cache
paths would distort the timing: its DynamicCache grows by torch.cat (copies the whole KV each step)
and its SDPA path materialises a [N, P+N] mask and falls back from flash attention when a prefix is
cached. Prefill attention is torch SDPA (flash) with a lower-right causal mask; the K/V heads are
repeated for GQA. The decode step reads a static KV cache through grouped matmuls (each K/V byte read
once, as a split-KV decode kernel does) and is captured in a CUDA graph (torch.cuda.CUDAGraph) and
timed by replaying it, since SGLang replays CUDA graphs for decode and eager decode is bound by
kernel launches. A correctness check compares this forward with transformers' own forward.

Output: $OUT/calibration.json (+ log). Timing: CUDA events, warm-up first, median of repeats.
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

OUT = os.environ.get("OUT", ".")
PART = os.environ.get("CAL_PART", "full")  # "full": the grids; "small": graph-captured short prefill + repeats
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"error: {e}"


import transformers  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb  # noqa: E402

DIMS = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
            num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=131072,
            rms_norm_eps=1e-6, tie_word_embeddings=False)
H, NH, KVH, HD, L = 3584, 28, 4, 128, 28
REP = NH // KVH
dev = torch.device("cuda")
result = {
    "model": "Qwen2.5-VL-7B language model architecture (Qwen2 7B dims), random weights, bf16",
    "dims": DIMS,
    "device": {
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1),
        "nvidia_smi": sh("nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader"),
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "python": platform.python_version(), "host_cpus": os.cpu_count(), "kernel": platform.release(),
    },
    "method": {},
    "checks": {},
    "prefill": [],
    "decode": [],
}


def save():
    with open(os.path.join(OUT, f"calibration-{PART}.json"), "w") as f:
        json.dump(result, f, indent=1)


def timed(fn, reps, warm=1):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts), ts


def graph_timed(fn, side_runs, reps):
    """fn captured in a CUDA graph (after side_runs runs on a side stream, as capture needs) and its replay timed(reps, warm=3)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(side_runs):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return timed(g.replay, reps, warm=3)


log("building model", result["device"])
cfg = Qwen2Config(**DIMS, rope_theta=1000000.0)
try:
    cfg._attn_implementation = "sdpa"
except Exception as e:  # noqa: BLE001
    log("could not set attn impl", e)
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
with torch.device(dev):
    model = Qwen2ForCausalLM(cfg)
model.eval().to(torch.bfloat16)
torch.set_default_dtype(torch.float32)
base = model.model
layers = list(base.layers)
rotary = base.rotary_emb
nparams = sum(p.numel() for p in model.parameters())
result["params"] = nparams
log("model ready, params", nparams, "attn impl", getattr(cfg, "_attn_implementation", "?"))


def rope(x, pos):
    return rotary(x, pos)


@torch.inference_mode()
def prefill(ids, P, kc, vc):
    """N new tokens at positions P..P+N-1 on a cache holding P tokens; returns last-token logits."""
    N = ids.shape[1]
    pos = torch.arange(P, P + N, device=dev).unsqueeze(0)
    h = base.embed_tokens(ids)
    cos, sin = rope(h, pos)
    mask = None
    if P > 0:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(N, P + N)
    for li, layer in enumerate(layers):
        a = layer.self_attn
        x = layer.input_layernorm(h)
        q = a.q_proj(x).view(1, N, NH, HD).transpose(1, 2)
        k = a.k_proj(x).view(1, N, KVH, HD).transpose(1, 2)
        v = a.v_proj(x).view(1, N, KVH, HD).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        kc[li][:, :, P:P + N] = k
        vc[li][:, :, P:P + N] = v
        K = kc[li][:, :, :P + N].repeat_interleave(REP, dim=1)
        V = vc[li][:, :, :P + N].repeat_interleave(REP, dim=1)
        if mask is None:
            o = F.scaled_dot_product_attention(q, K, V, is_causal=True)
        else:
            o = F.scaled_dot_product_attention(q, K, V, attn_mask=mask)
        h = h + a.o_proj(o.transpose(1, 2).reshape(1, N, H))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return model.lm_head(base.norm(h[:, -1:]))


def make_decode(B, C, kc, vc, ids, pos):
    """One decode step for B requests whose KV cache holds C tokens (the new one written at C-1)."""
    scale = HD ** -0.5

    @torch.inference_mode()
    def step():
        h = base.embed_tokens(ids)  # [B,1,H]
        cos, sin = rope(h, pos)
        for li, layer in enumerate(layers):
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = a.q_proj(x).view(B, 1, NH, HD).transpose(1, 2)
            k = a.k_proj(x).view(B, 1, KVH, HD).transpose(1, 2)
            v = a.v_proj(x).view(B, 1, KVH, HD).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            kc[li][:, :, C - 1:C].copy_(k)
            vc[li][:, :, C - 1:C].copy_(v)
            qg = q.reshape(B, KVH, REP, HD)
            s = torch.matmul(qg, kc[li].transpose(-1, -2)) * scale  # [B,KVH,REP,C]
            p = torch.softmax(s.float(), dim=-1).to(torch.bfloat16)
            o = torch.matmul(p, vc[li]).reshape(B, 1, H)
            h = h + a.o_proj(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return model.lm_head(base.norm(h))

    return step


def rel(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())


# ---- correctness: this forward against transformers' forward -----------------------------------
with torch.inference_mode():
    n0 = 257
    ids = torch.randint(0, DIMS["vocab_size"], (1, n0), device=dev)
    ref = model(input_ids=ids, use_cache=False).logits[:, -1:].float()
    ref_prev = model(input_ids=ids[:, :-1], use_cache=False).logits[:, -1:].float()
    kc = [torch.zeros(1, KVH, n0, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
    vc = [torch.zeros_like(t) for t in kc]
    mine_full = prefill(ids[:, :-1], 0, kc, vc)
    result["checks"]["prefill_vs_transformers_rel_err"] = rel(mine_full, ref_prev)
    kc2 = [torch.zeros_like(t) for t in kc]
    vc2 = [torch.zeros_like(t) for t in kc]
    prefill(ids[:, :128], 0, kc2, vc2)
    mine_split = prefill(ids[:, 128:256], 128, kc2, vc2)
    result["checks"]["prefix_prefill_vs_transformers_rel_err"] = rel(mine_split, ref_prev)
    step = make_decode(1, n0, kc, vc, ids[:, -1:].clone(), torch.tensor([[n0 - 1]], device=dev))
    result["checks"]["decode_vs_transformers_rel_err"] = rel(step(), ref)
    log("checks", result["checks"])
    del kc, vc, kc2, vc2
save()

if PART == "small":
    # Short prefill chunks are launch-bound in eager mode (as decode is): capture each in a CUDA graph.
    result["method"]["prefill_graph"] = ("prefill of N new tokens on P cached, the whole forward captured in a "
                                         "torch.cuda.CUDAGraph (static ids, static KV) and timed over 20 replays; "
                                         "eager time of the same call recorded beside it")
    result["prefill_graph"] = []
    cap = 32768 + 4096
    kc = [torch.randn(1, KVH, cap, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
    vc = [torch.randn(1, KVH, cap, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
    for P in [0, 1024, 4096, 8192, 16384, 32768]:
        for N in [16, 64, 256, 512, 1024, 2048, 4096]:
            ids = torch.randint(0, DIMS["vocab_size"], (1, N), device=dev)
            try:
                fn = lambda: prefill(ids, P, kc, vc)  # noqa: E731
                eager_ms, _ = timed(fn, 5, warm=2)
                ms, ts = graph_timed(fn, 2, 20)
                result["prefill_graph"].append({"new": N, "cached": P, "ms": round(ms, 3), "eager_ms": round(eager_ms, 3),
                                                "spread_ms": [round(min(ts), 3), round(max(ts), 3)]})
                log(f"graph prefill N={N} P={P}: {ms:.2f} ms (eager {eager_ms:.2f})")
            except Exception as e:  # noqa: BLE001
                result["prefill_graph"].append({"new": N, "cached": P, "error": repr(e)[:300]})
                log("graph prefill error", N, P, repr(e)[:300])
            torch.cuda.empty_cache()
        save()
    del kc, vc
    torch.cuda.empty_cache()
    # repeatability: a few points of the first run's grids again
    result["repeat"] = []
    kc = [torch.randn(1, KVH, 65536, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
    vc = [torch.randn(1, KVH, 65536, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
    for N, P in [(8192, 0), (8192, 8192), (32768, 0), (32768, 32768)]:
        ids = torch.randint(0, DIMS["vocab_size"], (1, N), device=dev)
        ms, ts = timed(lambda: prefill(ids, P, kc, vc), 3)
        result["repeat"].append({"new": N, "cached": P, "ms": round(ms, 3)})
        log(f"repeat prefill N={N} P={P}: {ms:.2f} ms")
    del kc, vc
    torch.cuda.empty_cache()
    save()

# ---- prefill grid -------------------------------------------------------------------------------
NS = [64, 256, 1024, 2048, 4096, 8192, 16384, 32768]
PS = [0, 1024, 4096, 8192, 16384, 32768]
result["method"]["prefill"] = ("hand forward over transformers' Qwen2 modules; SDPA flash attention, lower-right causal "
                               "mask when a prefix is cached; K/V repeated for GQA; logits for the last token only; "
                               "eager (prefill is compute-bound); CUDA events, median of repeats after one warm-up")
cap = max(PS) + max(NS) if PART == "full" else 1
kc = [torch.randn(1, KVH, cap, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
vc = [torch.randn(1, KVH, cap, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
for P in PS if PART == "full" else []:
    for N in NS:
        ids = torch.randint(0, DIMS["vocab_size"], (1, N), device=dev)
        reps = 3 if N >= 8192 else 5 if N >= 2048 else 10
        try:
            ms, ts = timed(lambda: prefill(ids, P, kc, vc), reps)
            result["prefill"].append({"new": N, "cached": P, "ms": round(ms, 3), "all_ms": [round(t, 3) for t in ts]})
            log(f"prefill N={N} P={P}: {ms:.2f} ms ({N / ms * 1000:.0f} tok/s)")
        except Exception as e:  # noqa: BLE001
            result["prefill"].append({"new": N, "cached": P, "error": repr(e)[:300]})
            log("prefill error", N, P, repr(e)[:300])
            torch.cuda.empty_cache()
    save()
# transformers' own forward for P=0, for comparison with the hand forward
result["transformers_prefill_p0"] = []
for N in [1024, 8192, 32768] if PART == "full" else []:
    ids = torch.randint(0, DIMS["vocab_size"], (1, N), device=dev)
    try:
        with torch.inference_mode():
            ms, _ = timed(lambda: model.lm_head(base(input_ids=ids, use_cache=False).last_hidden_state[:, -1:]), 3)
        result["transformers_prefill_p0"].append({"new": N, "ms": round(ms, 3)})
        log(f"transformers prefill N={N}: {ms:.2f} ms")
    except Exception as e:  # noqa: BLE001
        result["transformers_prefill_p0"].append({"new": N, "error": repr(e)[:300]})
        log("transformers prefill error", repr(e)[:300])
del kc, vc
torch.cuda.empty_cache()
save()

# ---- decode grid (CUDA graph replay) ------------------------------------------------------------
BS = [1, 4, 16, 32, 64, 128, 256]
CS = [512, 2048, 8192, 32768]
if PART == "small":
    BS, CS = [1, 8, 64, 192], [1024, 4096, 16384]
MAX_TOKENS = 1 << 20  # B*C bound: 1M tokens of KV = 56 GiB
result["method"]["decode"] = ("one decode step (embedding, 28 layers, lm_head for B tokens) over a static KV cache of C "
                              "tokens per request, attention as grouped matmuls (KV read once); captured in a "
                              "torch.cuda.CUDAGraph after 3 warm-up steps on a side stream and timed over 30 replays "
                              "(median); eager time of the same step recorded for comparison")
for C in CS:
    for B in BS:
        if B * C > MAX_TOKENS:
            continue
        try:
            kc = [torch.randn(B, KVH, C, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
            vc = [torch.randn(B, KVH, C, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
            ids = torch.randint(0, DIMS["vocab_size"], (B, 1), device=dev)
            pos = torch.full((B, 1), C - 1, device=dev, dtype=torch.long)
            step = make_decode(B, C, kc, vc, ids, pos)
            eager_ms, _ = timed(step, 5, warm=2)
            ms, ts = graph_timed(step, 3, 30)
            result["decode"].append({"batch": B, "context": C, "ms": round(ms, 3), "eager_ms": round(eager_ms, 3)})
            log(f"decode B={B} C={C}: graph {ms:.2f} ms, eager {eager_ms:.2f} ms")
            del kc, vc, step
        except Exception as e:  # noqa: BLE001
            result["decode"].append({"batch": B, "context": C, "error": repr(e)[:300]})
            log("decode error", B, C, repr(e)[:300])
        torch.cuda.empty_cache()
    save()
result["device"]["nvidia_smi_after"] = sh("nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader")
result["wall_s"] = round(time.time() - T0, 1)
save()
log("done")
