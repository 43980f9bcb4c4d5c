#!/usr/bin/env python3
"""Batched generation: furlong's rollout engine (bench/generate_bench.cpp) against HF
transformers `generate` (and, with --model qwen3_0.6b, llama.cpp's `llama-batched-bench`), same
machine, model, prompt length, thread count and sampling settings, one run each (after one
warm-up run). Output tokens/s counts prefill + decode and excludes model load.

Default mode: batches of 1, 8 and 64 requests on a tiny model and a ~100M one
(bench/configs/qwen3_tiny.json, qwen3_100m.json), temperature 1, no top-k/top-p, eos ignored,
fp32; reports output tokens/s and time to first token (TTFT: submit -> first token of every
request, i.e. the batch's prefill; HF's TTFT is the time of generate(max_new_tokens=1) on the
same batch) and writes bench/results/generate_bench.json.

  .venv/bin/python bench/generate_bench.py [--build-dir build] [--threads 2] [--quick]

Qwen3-0.6B mode (bench/configs/qwen3_0.6b.json: 28 layers, hidden 1024, 16/8 heads of 128,
intermediate 3072, vocab 151936, tied embeddings, random weights, the real Qwen3 tokenizer):
furlong, transformers and llama.cpp side by side, 32 prompt tokens, 64 new tokens, greedy, eos
ignored, 2 threads, batches 1, 8, 32, 64, in fp32 and bf16 (furlong --dtype float32/bfloat16,
transformers dtype float32/bfloat16, llama.cpp f32/bf16 GGUF). Records the machine limits
(bench/machine_limits.py: copy bandwidth, fp32/bf16 GEMM rate, roofline bounds, CPU features,
load), peak RSS of every peer process, and furlong/llama.cpp and furlong/transformers ratios
per cell, and writes bench/results/generate_bench_0.6b.json. The first run builds llama.cpp
(bench/llama_cpp.py; from PyPI's llama-cpp-python sdist, cached in .cache/llama.cpp/) and
converts the model to GGUF; later runs are offline. About an hour on 2 cores.

  .venv/bin/python bench/generate_bench.py --model qwen3_0.6b [--batches 1,8,32,64]
      [--dtypes float32,bfloat16] [--peers furlong,transformers,llama.cpp] [--timeout 1800]
      [--repeats 3]    # timed runs of furlong and llama.cpp per cell, the median reported
      [--isa-cap avx2] # what an AVX2-only CPU runs, on an AVX-512 one (ISA_CAP_NOTE)
"""
import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import llama_cpp  # noqa: E402
import machine_limits  # noqa: E402
import run_all  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
# The "tuned" transformers run gets the huge-page settings furlong applies to itself.
PEER_TUNED_ENV = run_all.PEER_TUNED_ENV


def ensure_model(name, build_dir):
    """bench/run_all.py's random-weight HF directory for bench/configs/<name>.json, plus the
    Qwen3 tokenizer files the engine loads."""
    out = run_all.ensure_model(name, build_dir)
    tok = ROOT / ".cache" / "tokenizers" / "qwen3"
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if not (out / f).exists():
            shutil.copy(tok / f, out / f)
    return out


def last_json(stdout, what):
    lines = stdout.strip().splitlines()
    if not lines:
        raise SystemExit(f"{what} printed nothing")
    return json.loads(lines[-1])


def hf_run(model_dir, batch, prompt_len, max_new, threads, extra_env=None, dtype="float32",
           greedy=False, timeout=1800):
    code = r'''
import json, sys, time, torch
from transformers import AutoModelForCausalLM
model_dir, batch, prompt_len, max_new, threads = sys.argv[1], *map(int, sys.argv[2:6])
dtype, greedy = getattr(torch, sys.argv[6]), sys.argv[7] == "1"
if threads > 0: torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa")
model.eval()
vocab = model.config.vocab_size
ids = torch.tensor([[(b * 131 + i * 31 + 7) % vocab for i in range(prompt_len)] for b in range(batch)])
kw = dict(attention_mask=torch.ones_like(ids), eos_token_id=None, pad_token_id=0)
kw.update(dict(do_sample=False, temperature=None, top_k=None, top_p=None) if greedy else
          dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0))
def gen(n):
    torch.manual_seed(0)
    with torch.inference_mode():
        t = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        return time.perf_counter() - t, (out.shape[1] - prompt_len) * batch
gen(min(max_new, 4))  # warm-up
ttft, _ = gen(1)
seconds, tokens = gen(max_new)
print(json.dumps({"impl": "transformers", "batch": batch, "seconds": seconds, "output_tokens": tokens,
                  "output_tokens_per_s": tokens / seconds, "ttft_mean_s": ttft, "ttft_max_s": ttft,
                  "threads": torch.get_num_threads(), "dtype": str(dtype).removeprefix("torch."),
                  "torch": torch.__version__,
                  "transformers": __import__("transformers").__version__}))
'''
    cmd = [PY, "-c", code, str(model_dir), str(batch), str(prompt_len), str(max_new), str(threads),
           dtype, "1" if greedy else "0"]
    stdout, _, rss = llama_cpp.run_measured(cmd, dict(os.environ, **(extra_env or {})), timeout,
                                            f"transformers (batch {batch}, {dtype})")
    return dict(last_json(stdout, "transformers"), peak_rss_gb=rss)


def furlong_run(binary, model_dir, batch, prompt_len, max_new, threads, exact, dtype="float32",
                temperature=1.0, timeout=1800, runs=1):
    env = dict(os.environ, FURLONG_LOG_LEVEL="warn")
    cmd = [str(binary), "--hf-checkpoint", str(model_dir), "--batch", str(batch),
           "--prompt-len", str(prompt_len), "--max-new-tokens", str(max_new),
           "--threads", str(threads), "--temperature", f"{temperature:g}",
           "--exact-logprobs" if exact else "--no-exact-logprobs"]
    if runs > 1:  # timed runs in one process, the median reported
        cmd += ["--runs", str(runs)]
    if dtype != "float32":  # the flag's default; older binaries may lack --dtype
        cmd += ["--dtype", dtype]
    stdout, _, rss = llama_cpp.run_measured(cmd, env, timeout, f"furlong (batch {batch}, {dtype})")
    return dict(last_json(stdout, "furlong"), peak_rss_gb=rss)


# --isa-cap avx2: the environment that caps ATen, oneDNN and MKL at AVX2 (furlong's kernels
# follow ATen's cap), for furlong, transformers and the machine-limit probes alike.
ISA_CAP_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                        "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
ISA_CAP_NOTE = ("--isa-cap avx2 on an AVX-512 CPU: ATen, oneDNN and MKL capped at AVX2 "
                "(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2), "
                "furlong takes its AVX2 paths (avx2_linear, not avx512_linear), llama.cpp built "
                "without AVX-512 (bench/llama_cpp.py use_isa_cap). Not capped: furlong's "
                "target_clones kernels (skinny_linear's small weights, decode attention, "
                "RMSNorm, RoPE, SwiGLU) still run their AVX-512 builds, and the CPU's caches, "
                "memory and clock are those of this machine, not of an AVX2-only one.")
GGUF_TYPE = {"float32": "f32", "bfloat16": "bf16"}
LIMIT_KEY = {"float32": "fp32", "bfloat16": "bf16"}


def furlong_build(binary):
    """Which furlong binary ran: its mtime and the checkout's commit (others rebuild it)."""
    out = {"binary": str(binary)}
    if binary.exists():
        out["binary_mtime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                            time.gmtime(binary.stat().st_mtime))
    try:
        out["git_head"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True, timeout=30).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        pass
    return out


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def llama_median_rows(gguf, prompt_len, max_new, batches, threads, timeout, repeats):
    """llama_cpp.run `repeats` times (one process each); per batch the median run's row, with
    every run's output tokens/s listed."""
    runs, cmd = [], None
    for _ in range(repeats):
        rows, cmd = llama_cpp.run(gguf, prompt_len, max_new, batches, threads, timeout)
        runs.append(rows)
    out = {}
    for b in batches:
        by_rate = sorted((r[b] for r in runs), key=lambda row: row["output_tokens_per_s"])
        out[b] = dict(by_rate[len(by_rate) // 2], runs=repeats,
                      runs_output_tokens_per_s=[r[b]["output_tokens_per_s"] for r in runs])
    return out, cmd


def main_06b(a, binary, build_dir):
    """Qwen3-0.6B shape: furlong, transformers and llama.cpp side by side, per dtype and batch."""
    name = a.model
    batches = [int(b) for b in (a.batches or "1,8,32,64").split(",")]
    dtypes = a.dtypes.split(",")
    peers = a.peers.split(",")
    prompt_len, max_new = a.prompt_len, a.max_new_tokens or 64
    for d in dtypes:
        if d not in GGUF_TYPE:
            raise SystemExit(f"--dtypes: {d} is not float32 or bfloat16")
    if "furlong" in peers and not binary.exists():
        raise SystemExit(f"{binary} is missing: build it with ninja -C {build_dir}")
    if a.isa_cap:
        if a.isa_cap not in ISA_CAP_ENV:
            raise SystemExit(f"--isa-cap: {a.isa_cap} is not one of {', '.join(ISA_CAP_ENV)}")
        os.environ.update(ISA_CAP_ENV[a.isa_cap])
        llama_cpp.use_isa_cap(a.isa_cap)
    load_before, procs_before = uptime(), machine_limits.load().get("top_processes")
    build_before = furlong_build(binary)
    print(f"load: {load_before}", flush=True)
    model_dir = ensure_model(name, build_dir)
    cfg = json.loads((ROOT / "bench" / "configs" / f"{name}.json").read_text())
    ggufs, llama_version = {}, None
    if "llama.cpp" in peers:
        llama_cpp.ensure_binary()
        llama_version = llama_cpp.version()
        for d in dtypes:
            ggufs[d] = llama_cpp.ensure_gguf(model_dir, name, GGUF_TYPE[d])
    print("measuring machine limits (copy bandwidth, fp32/bf16 GEMM)", flush=True)
    limits = machine_limits.measure(a.threads)
    bounds = machine_limits.bounds(limits, cfg, prompt_len, max_new)

    def save(complete):
        """Writes the results so far (after every cell, so a cut-off run keeps its cells)."""
        out = {"benchmark": "generate", "model": name, "config": cfg,
               **machine_limits.cpu_info(),
               "threads": a.threads, "prompt_len": prompt_len, "max_new_tokens": max_new,
               "dtypes": dtypes, "batches": batches, "peers": peers,
               "exact_logprobs": a.exact_logprobs,
               "sampling": "greedy, ignore eos", "complete": complete,
               "prompts": "furlong and transformers: deterministic pseudo-random ids "
                          "(b*131 + i*31 + 7) % vocab; llama.cpp: its own random ids, prompts "
                          "not shared between sequences",
               "metric": "output_tokens_per_s = batch * max_new_tokens / (prefill + decode "
                         "seconds), model load excluded; after a warm-up (furlong: one full "
                         "untimed run; transformers: a 4-token generate; llama.cpp: a 16-token "
                         f"decode), the median of {a.repeats} timed runs for furlong (in one "
                         f"process) and llama.cpp ({a.repeats} processes), one timed run for "
                         "transformers",
               "repeats": a.repeats,
               **({"isa_cap": a.isa_cap, "isa_cap_note": ISA_CAP_NOTE} if a.isa_cap else {}),
               "machine_limits": limits, "bounds": bounds,
               "llama_cpp": llama_version,
               "furlong_build": {"before": build_before, "after": furlong_build(binary)},
               "load": {"before": load_before, "top_processes_before": procs_before,
                        "after": uptime(), "top_processes_after":
                        machine_limits.load().get("top_processes")},
               "note": ("furlong's binary changed while this ran: its figures are mixed. "
                        if furlong_build(binary).get("binary_mtime") !=
                        build_before.get("binary_mtime") else "") +
                       "Peak RSS (peak_rss_gb) is per process from wait4: furlong and "
                       "transformers one process per cell, llama.cpp one process per dtype for "
                       "all batch sizes.",
               "results": results,
               "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        res_dir = ROOT / "bench" / "results"
        res_dir.mkdir(parents=True, exist_ok=True)
        path = res_dir / a.out if a.out else res_dir / "generate_bench_0.6b.json"
        path.write_text(json.dumps(out, indent=2) + "\n")
        return path

    results = []
    print(f"{'dtype':<9} {'batch':>5} {'furlong':>9} {'hf':>9} {'llama.cpp':>9} {'f/hf':>6} "
          f"{'f/llama':>7} {'f rss GB':>8}   (output tokens/s, prefill + decode)", flush=True)
    for d in dtypes:
        llama_rows = {}
        if "llama.cpp" in peers:
            t = time.time()
            llama_rows, llama_cmd = llama_median_rows(ggufs[d], prompt_len, max_new, batches,
                                                      a.threads, a.timeout, a.repeats)
            for row in llama_rows.values():
                row["dtype"] = GGUF_TYPE[d]
                row["cmd"] = " ".join(llama_cmd)
            print(f"  llama.cpp {GGUF_TYPE[d]} all batches: {time.time() - t:.0f} s", flush=True)
        for batch in batches:
            cell = {"model": name, "dtype": d, "batch": batch}
            if "furlong" in peers:
                cell["furlong"] = furlong_run(binary, model_dir, batch, prompt_len, max_new,
                                              a.threads, a.exact_logprobs, d, 0.0, a.timeout,
                                              runs=a.repeats)
            if "transformers" in peers:
                cell["transformers"] = hf_run(model_dir, batch, prompt_len, max_new, a.threads,
                                              dtype=d, greedy=True, timeout=a.timeout)
            if llama_rows:
                cell["llama.cpp"] = llama_rows[batch]
            tps = {k: cell[k]["output_tokens_per_s"] for k in ("furlong", "transformers",
                                                                "llama.cpp") if k in cell}
            if "furlong" in tps:
                for k, key in (("transformers", "ratio_furlong_over_transformers"),
                               ("llama.cpp", "ratio_furlong_over_llama_cpp")):
                    if k in tps:
                        cell[key] = tps["furlong"] / tps[k]
            b = bounds[LIMIT_KEY[d]]
            if batch == 1:
                cell["bound_tokens_per_s"] = b["batch1_bound_tokens_per_s"]
                cell["bound"] = "memory: bandwidth / weight bytes per token"
            elif batch >= 32:
                cell["bound_tokens_per_s"] = b["batch32plus_bound_tokens_per_s"]
                cell["goal_tokens_per_s"] = b["batch32plus_goal_tokens_per_s"]
                cell["bound"] = "compute: GEMM rate / FLOPs per token (goal: half of it)"
            if "furlong" in tps:
                cell["furlong_vs_machine"] = machine_limits.cell_limits(
                    limits, bounds, LIMIT_KEY[d], batch, tps["furlong"])
            results.append(cell)
            save(False)

            def fmt(k, w=9):
                return f"{tps[k]:>{w}.1f}" if k in tps else f"{'-':>{w}}"

            def rat(key, w):
                return f"{cell[key]:>{w - 1}.2f}x" if key in cell else f"{'-':>{w}}"
            rss = cell.get("furlong", {}).get("peak_rss_gb")
            print(f"{d:<9} {batch:>5} {fmt('furlong')} {fmt('transformers')} {fmt('llama.cpp')} "
                  f"{rat('ratio_furlong_over_transformers', 6)} "
                  f"{rat('ratio_furlong_over_llama_cpp', 7)} "
                  f"{rss if rss is None else round(rss, 2)!s:>8}", flush=True)
    print(f"wrote {save(True)}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default="build")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="default 32 (64 with --model qwen3_0.6b)")
    p.add_argument("--models", default="qwen3_tiny,qwen3_100m")
    p.add_argument("--model", default=None,
                   help="qwen3_0.6b: the three-peer fp32/bf16 comparison (see the docstring)")
    p.add_argument("--batches", default=None, help="default 1,8,64 (1,8,32,64 with --model)")
    p.add_argument("--dtypes", default="float32,bfloat16", help="with --model")
    p.add_argument("--peers", default="furlong,transformers,llama.cpp", help="with --model")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per peer process")
    p.add_argument("--repeats", type=int, default=3,
                   help="with --model: timed runs of furlong and llama.cpp per cell (median)")
    p.add_argument("--out", default=None, help="results file name under bench/results")
    p.add_argument("--isa-cap", default=None,
                   help="with --model: avx2 runs every peer as an AVX2-only CPU would (ATen, "
                        "oneDNN, MKL capped; llama.cpp built without AVX-512)")
    p.add_argument("--quick", action="store_true", help="tiny model, batches 1 and 8 only")
    p.add_argument("--exact-logprobs", action="store_true",
                   help="furlong with exact_logprobs (trainer-identical log-probs, one more "
                        "prefill per request); default off, the engine's default")
    a = p.parse_args()
    build_dir = (ROOT / a.build_dir).resolve()
    binary = build_dir / "bench" / "furlong_generate_bench"
    if not binary.exists():
        binary = build_dir / "furlong_generate_bench"
    if a.model:
        return main_06b(a, binary, build_dir)
    a.max_new_tokens = a.max_new_tokens or 32
    models = ["qwen3_tiny"] if a.quick else a.models.split(",")
    batches = [1, 8] if a.quick else [int(b) for b in (a.batches or "1,8,64").split(",")]
    results = []
    print(f"{'model':<12} {'batch':>5} {'furlong tok/s':>14} {'hf tok/s':>10} {'ratio':>7} "
          f"{'hf tuned':>10} {'ratio':>7} {'furlong ttft':>13} {'hf ttft':>9}")
    for name in models:
        model_dir = ensure_model(name, build_dir)
        for batch in batches:
            f = furlong_run(binary, model_dir, batch, a.prompt_len, a.max_new_tokens, a.threads,
                            a.exact_logprobs, timeout=a.timeout)
            h = hf_run(model_dir, batch, a.prompt_len, a.max_new_tokens, a.threads,
                       timeout=a.timeout)
            ht = hf_run(model_dir, batch, a.prompt_len, a.max_new_tokens, a.threads,
                        PEER_TUNED_ENV, timeout=a.timeout)
            ratio = f["output_tokens_per_s"] / h["output_tokens_per_s"]
            ratio_tuned = f["output_tokens_per_s"] / ht["output_tokens_per_s"]
            results.append({"model": name, "batch": batch, "furlong": f, "transformers": h,
                            "transformers_tuned": ht, "throughput_ratio": ratio,
                            "throughput_ratio_vs_tuned": ratio_tuned,
                            "ttft_ratio_hf_over_furlong": h["ttft_mean_s"] / f["ttft_mean_s"]})
            print(f"{name:<12} {batch:>5} {f['output_tokens_per_s']:>14.1f} "
                  f"{h['output_tokens_per_s']:>10.1f} {ratio:>6.2f}x "
                  f"{ht['output_tokens_per_s']:>10.1f} {ratio_tuned:>6.2f}x "
                  f"{f['ttft_mean_s']:>12.3f}s {h['ttft_mean_s']:>8.3f}s", flush=True)
    out = {"benchmark": "generate", "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "threads": a.threads, "prompt_len": a.prompt_len,
           "max_new_tokens": a.max_new_tokens, "dtype": "float32",
           "exact_logprobs": a.exact_logprobs,
           "sampling": "temperature 1, no top-k/top-p, ignore eos, seeded",
           "note": "one run per cell after a warm-up, on an otherwise idle 2-core machine "
                   "(CPU contention slows transformers more than furlong and inflates the "
                   "ratios). 'transformers_tuned' runs with the huge-page settings furlong "
                   "applies to itself (PEER_TUNED_ENV). "
                   "exact_logprobs (trainer-identical log-probs, one more prefill of prompt + "
                   "output per request) is recorded per furlong run.",
           "results": results, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    res_dir = ROOT / "bench" / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / (a.out or "generate_bench.json")).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {res_dir / (a.out or 'generate_bench.json')}")


if __name__ == "__main__":
    main()
