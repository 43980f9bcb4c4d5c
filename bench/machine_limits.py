#!/usr/bin/env python3
"""Machine limits for the generation benchmark: measured memory copy bandwidth and fp32 / bf16
GEMM rates (torch, the given thread count), CPU model and features, and from them the roofline
bounds on output tokens/s for a model shape:

  batch 1 (memory bound):   bandwidth / weight bytes read per token
  batch >= 32 (compute):    GEMM rate / (2 * params + attention FLOPs per token)
                            (recorded in full and as the goal of half of it)

  .venv/bin/python bench/machine_limits.py [--threads 2] [--config bench/configs/qwen3_0.6b.json]
"""
import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


def cpu_info():
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and ":" in line:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"cpu_model": model, "cpus": os.cpu_count(),
            "cpu_features": {f: f in flags for f in FEATURES}}


def load():
    """uptime's load averages, and the busiest other processes (others share the machine)."""
    out = {"loadavg": list(os.getloadavg())}
    try:
        ps = subprocess.run(["ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"],
                            capture_output=True, text=True, timeout=10).stdout.splitlines()
        out["top_processes"] = [" ".join(line.split()) for line in ps[:5]]
    except (subprocess.SubprocessError, OSError):
        pass
    return out


MEASURE = r'''
import json, sys, time, torch
threads = int(sys.argv[1])
torch.set_num_threads(threads)
def best(fn, reps):
    fn()
    t = []
    for _ in range(reps):
        s = time.perf_counter(); fn(); t.append(time.perf_counter() - s)
    return min(t)
# Copy bandwidth: 1 GiB fp32 source into a preallocated destination (read + write bytes).
n = 256 * 1024 * 1024
src = torch.ones(n); dst = torch.empty(n)
s = best(lambda: dst.copy_(src), 5)
copy_gbs = 2 * n * 4 / s / 1e9
del src, dst
out = {"copy_bandwidth_gb_s": copy_gbs, "copy_bytes": n * 4, "torch": torch.__version__,
       "threads": torch.get_num_threads()}
m = 2048
for dt, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
    a = torch.randn(m, m).to(dt); b = torch.randn(m, m).to(dt)
    s = best(lambda: torch.mm(a, b), 3)
    out[f"gemm_{name}_gflop_s"] = 2 * m ** 3 / s / 1e9
print(json.dumps(out))
'''


def measure(threads, timeout=600):
    r = subprocess.run([PY, "-c", MEASURE, str(threads)], capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"machine limit measurement failed:\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["gemm_shape"] = "torch.mm 2048x2048x2048"
    return out


def model_costs(cfg, context):
    """Parameter count, weight bytes per decoded token (per dtype size) and FLOPs per token
    at an average attention context of `context` tokens."""
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", h // nq)
    vocab = cfg["vocab_size"]
    per_layer = h * nq * hd + 2 * h * nkv * hd + nq * hd * h + 3 * h * inter + 2 * h + 2 * hd
    embed = vocab * h
    lm_head = 0 if cfg.get("tie_word_embeddings") else vocab * h
    params = layers * per_layer + embed + lm_head + h
    # Matmul weights every token reads: all layer weights plus the lm_head (the tied
    # embedding matrix); the embedding lookup itself reads one row.
    matmul_params = layers * per_layer + vocab * h
    # Attention: QK^T and PV, 2 FLOPs per multiply-add, per query head per context token.
    attn_flops = layers * nq * hd * 2 * 2 * context
    return {"params": params, "matmul_params": matmul_params,
            "flops_per_token": 2 * matmul_params + attn_flops,
            "attention_flops_per_token": attn_flops, "attention_context": context}


def bounds(limits, cfg, prompt_len, max_new):
    """Roofline bounds on output tokens/s, per dtype."""
    # Mean context seen by a generated token (prompt + half the generated tokens).
    context = prompt_len + max_new / 2
    costs = model_costs(cfg, context)
    # A prompt token runs every layer but not the lm_head (only a prompt's last token does),
    # attending over half the prompt on average; spread over the output tokens.
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    prompt_costs = model_costs(cfg, prompt_len / 2)
    prompt_flops = 2 * (prompt_costs["matmul_params"] - vocab * h) + \
        prompt_costs["attention_flops_per_token"]
    costs["prompt_flops_per_output_token"] = prompt_flops * prompt_len / max_new
    # K and V rows a decode step reads per sequence, per byte of the cache dtype.
    hd = cfg.get("head_dim", h // cfg["num_attention_heads"])
    kv_elems = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * hd * context
    costs["kv_elements_per_sequence_step"] = kv_elems
    out = {"model_costs": costs}
    for name, size in (("fp32", 4), ("bf16", 2)):
        wbytes = costs["matmul_params"] * size
        gemm = limits[f"gemm_{name}_gflop_s"] * 1e9
        full = gemm / costs["flops_per_token"]
        out[name] = {"weight_bytes_per_token": wbytes,
                     "kv_bytes_per_sequence_step": kv_elems * size,
                     "batch1_bound_tokens_per_s": limits["copy_bandwidth_gb_s"] * 1e9 / wbytes,
                     "batch32plus_bound_tokens_per_s": full,
                     "batch32plus_goal_tokens_per_s": 0.5 * full}
    return out


def cell_limits(limits, bounds_, dtype_key, batch, tokens_per_s):
    """Where one measured cell stands against the machine: its FLOP rate as a fraction of the
    GEMM rate, counting output tokens only (the goal's accounting) and counting the prompt
    tokens' FLOPs too, and the decode bandwidth bound at this batch (weights plus every
    sequence's K/V read once per step, at the copy bandwidth; prefill not counted)."""
    costs, b = bounds_["model_costs"], bounds_[dtype_key]
    gemm = limits[f"gemm_{dtype_key}_gflop_s"] * 1e9
    step_bytes = b["weight_bytes_per_token"] + batch * b["kv_bytes_per_sequence_step"]
    return {"gemm_fraction": tokens_per_s * costs["flops_per_token"] / gemm,
            "gemm_fraction_all_tokens": tokens_per_s * (
                costs["flops_per_token"] + costs["prompt_flops_per_output_token"]) / gemm,
            "decode_bandwidth_bound_tokens_per_s":
                batch * limits["copy_bandwidth_gb_s"] * 1e9 / step_bytes}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--config", default=str(ROOT / "bench" / "configs" / "qwen3_0.6b.json"))
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=64)
    a = p.parse_args()
    t = time.time()
    lim = measure(a.threads)
    cfg = json.load(open(a.config))
    print(json.dumps({**cpu_info(), **lim, "bounds": bounds(lim, cfg, a.prompt_len,
                                                               a.max_new_tokens),
                      "load": load(), "seconds": time.time() - t}, indent=2))


if __name__ == "__main__":
    main()
