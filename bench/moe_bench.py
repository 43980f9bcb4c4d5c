#!/usr/bin/env python3
"""Mixture-of-experts: furlong against HF transformers on a small Qwen3-MoE shape
(bench/configs/qwen3_moe_small.json: 8 layers, hidden 512, 8/4 heads of 64, 32 experts of 256
with top-4 routing and norm_topk_prob, vocab 151936, tied embeddings, random weights), same
machine, thread count and inputs, side by side in one run:

- training step (forward + backward of the mean next-token loss over packed documents) and
  scoring (log-probs + entropies), tokens/s: bench/model_bench.cpp vs bench/hf_model_bench.py,
  rotating order over --rounds rounds (bench/run_all.py's side_by_side);
- batched generation, output tokens/s (prefill + decode, greedy, eos ignored): the rollout
  engine (bench/generate_bench.cpp) vs transformers `generate` (bench/generate_bench.py).

transformers runs its default experts implementation (recorded in the JSON: "grouped_mm" where
torch has it); furlong groups tokens by expert and runs one GEMM per expert and projection.
Writes bench/results/moe_bench.json with the CPU features. Run it on an otherwise idle machine.

  .venv/bin/python bench/moe_bench.py [--build-dir build] [--threads 2] [--rounds 3]
      [--dtypes float32,bfloat16] [--batches 1,8,32] [--quick]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import generate_bench  # noqa: E402
import machine_limits  # noqa: E402
import run_all  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
MODEL = "qwen3_moe_small"


def hf_experts_implementation(model_dir):
    code = ("import sys; from transformers import AutoModelForCausalLM as M; "
            "m = M.from_pretrained(sys.argv[1]); "
            "print(getattr(m.config, '_experts_implementation', None))")
    out = subprocess.run([PY, "-c", code, str(model_dir)], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 else None


def bench_train_score(a, build_dir, model_dir, env):
    rows = []
    tokens = a.docs * a.doc_len
    for dtype in a.dtypes:
        for mode in ("train", "score"):
            common = ["--hf-checkpoint", str(model_dir), "--mode", mode, "--dtype", dtype,
                      "--docs", str(a.docs), "--doc-len", str(a.doc_len), "--iters",
                      str(a.iters), "--warmup", "1", "--threads", str(a.threads)]
            sides = [("furlong", [str(build_dir / "bench" / "furlong_model_bench")] + common, {}),
                     ("transformers", [PY, str(ROOT / "bench" / "hf_model_bench.py")] + common,
                      {})]
            med, raw = run_all.side_by_side(sides, a.rounds, env)
            fl, hf = med["furlong"], med["transformers"]
            rows.append({"dtype": dtype, "mode": mode, "tokens": tokens,
                         "furlong_tokens_per_s": tokens / fl,
                         "transformers_tokens_per_s": tokens / hf,
                         "ratio_furlong_over_transformers": hf / fl, "raw": raw})
            print(f"  {mode:5s} {dtype:8s} furlong {tokens / fl:8.0f} tok/s  transformers "
                  f"{tokens / hf:8.0f} tok/s  x{hf / fl:.2f}", flush=True)
    return rows


def bench_generate(a, build_dir, model_dir):
    rows = []
    binary = build_dir / "bench" / "furlong_generate_bench"
    for dtype in a.dtypes:
        for batch in a.batches:
            fl = generate_bench.furlong_run(binary, model_dir, batch, a.prompt_len, a.max_new,
                                            a.threads, False, dtype, 0.0, a.timeout)
            hf = generate_bench.hf_run(model_dir, batch, a.prompt_len, a.max_new, a.threads,
                                       dtype=dtype, greedy=True, timeout=a.timeout)
            f_tps, h_tps = fl["output_tokens_per_s"], hf["output_tokens_per_s"]
            rows.append({"dtype": dtype, "batch": batch, "furlong": fl, "transformers": hf,
                         "ratio_furlong_over_transformers": f_tps / h_tps})
            print(f"  generate {dtype:8s} batch {batch:3d}: furlong {f_tps:7.1f} tok/s  "
                  f"transformers {h_tps:7.1f} tok/s  x{f_tps / h_tps:.2f}", flush=True)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default="build")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--doc-len", type=int, default=128)
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-new-tokens", dest="max_new", type=int, default=32)
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--quick", action="store_true", help="1 round, fp32, batches 1 and 8")
    a = p.parse_args()
    a.dtypes = a.dtypes.split(",")
    a.batches = [int(b) for b in a.batches.split(",")]
    if a.quick:
        a.rounds, a.dtypes, a.batches, a.max_new = 1, ["float32"], [1, 8], 16
    build_dir = (ROOT / a.build_dir).resolve()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), FURLONG_NO_PROGRESS="1")
    model_dir = generate_bench.ensure_model(MODEL, build_dir)
    cfg = json.loads((ROOT / "bench" / "configs" / f"{MODEL}.json").read_text())
    load_before = generate_bench.uptime()
    print(f"load: {load_before}", flush=True)
    print("training step and scoring (tokens/s, higher is better):", flush=True)
    train_rows = bench_train_score(a, build_dir, model_dir, env)
    print("generation (output tokens/s, prefill + decode):", flush=True)
    gen_rows = bench_generate(a, build_dir, model_dir)
    out = {"benchmark": "moe", "model": MODEL, "config": cfg, **machine_limits.cpu_info(),
           "threads": a.threads, "rounds": a.rounds,
           "transformers_experts_implementation": hf_experts_implementation(model_dir),
           "train_score": {"docs": a.docs, "doc_len": a.doc_len, "results": train_rows},
           "generate": {"prompt_len": a.prompt_len, "max_new_tokens": a.max_new,
                        "sampling": "greedy, ignore eos", "results": gen_rows},
           "furlong_build": generate_bench.furlong_build(build_dir / "bench" /
                                                         "furlong_model_bench"),
           "load": {"before": load_before, "after": generate_bench.uptime()},
           "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = ROOT / "bench" / "results" / "moe_bench.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
