#!/usr/bin/env python3
"""Batched generation: furlong's rollout engine (bench/generate_bench.cpp) against HF
transformers `generate`, same machine, model, prompts, thread count and sampling settings
(temperature 1, no top-k/top-p, eos ignored, fp32), one run each (after one warm-up run).

Reports output tokens/s and time to first token (TTFT: submit -> first token of every request,
i.e. the batch's prefill) for batches of 1, 8 and 64 requests on a tiny model and a ~100M one
(bench/configs/qwen3_tiny.json, qwen3_100m.json), and writes bench/results/generate_bench.json.
HF's TTFT is the time of generate(max_new_tokens=1) on the same batch.

  .venv/bin/python bench/generate_bench.py [--build-dir build] [--threads 2] [--quick]
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


def hf_run(model_dir, batch, prompt_len, max_new, threads, extra_env=None):
    code = r'''
import json, sys, time, torch
from transformers import AutoModelForCausalLM
model_dir, batch, prompt_len, max_new, threads = sys.argv[1], *map(int, sys.argv[2:6])
if threads > 0: torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
model.eval()
vocab = model.config.vocab_size
ids = torch.tensor([[(b * 131 + i * 31 + 7) % vocab for i in range(prompt_len)] for b in range(batch)])
kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
          eos_token_id=None, pad_token_id=0)
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
                  "threads": torch.get_num_threads()}))
'''
    out = subprocess.run([PY, "-c", code, str(model_dir), str(batch), str(prompt_len), str(max_new),
                          str(threads)], check=True, capture_output=True, text=True,
                         env=dict(os.environ, **(extra_env or {})))
    return json.loads(out.stdout.strip().splitlines()[-1])


def furlong_run(binary, model_dir, batch, prompt_len, max_new, threads, exact):
    env = dict(os.environ, FURLONG_LOG_LEVEL="warn")
    out = subprocess.run([str(binary), "--hf-checkpoint", str(model_dir), "--batch", str(batch),
                          "--prompt-len", str(prompt_len), "--max-new-tokens", str(max_new),
                          "--threads", str(threads), "--temperature", "1",
                          "--exact-logprobs" if exact else "--no-exact-logprobs"],
                         check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default="build")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--models", default="qwen3_tiny,qwen3_100m")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--quick", action="store_true", help="tiny model, batches 1 and 8 only")
    p.add_argument("--exact-logprobs", action="store_true",
                   help="furlong with exact_logprobs (trainer-identical log-probs, one more "
                        "prefill per request); default off, the engine's default")
    a = p.parse_args()
    build_dir = (ROOT / a.build_dir).resolve()
    binary = build_dir / "bench" / "furlong_generate_bench"
    if not binary.exists():
        binary = build_dir / "furlong_generate_bench"
    models = ["qwen3_tiny"] if a.quick else a.models.split(",")
    batches = [1, 8] if a.quick else [int(b) for b in a.batches.split(",")]
    results = []
    print(f"{'model':<12} {'batch':>5} {'furlong tok/s':>14} {'hf tok/s':>10} {'ratio':>7} "
          f"{'hf tuned':>10} {'ratio':>7} {'furlong ttft':>13} {'hf ttft':>9}")
    for name in models:
        model_dir = ensure_model(name, build_dir)
        for batch in batches:
            f = furlong_run(binary, model_dir, batch, a.prompt_len, a.max_new_tokens, a.threads,
                            a.exact_logprobs)
            h = hf_run(model_dir, batch, a.prompt_len, a.max_new_tokens, a.threads)
            ht = hf_run(model_dir, batch, a.prompt_len, a.max_new_tokens, a.threads,
                        PEER_TUNED_ENV)
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
    (res_dir / "generate_bench.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {res_dir / 'generate_bench.json'}")


if __name__ == "__main__":
    main()
