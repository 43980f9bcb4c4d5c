#!/usr/bin/env python3
"""A real RL step side by side: `furlong train` against TRL's GRPOTrainer on SmolLM2-135M-Instruct.

Both sides get the same model, data (the demo's two-digit addition, examples/smollm2), reward
(the last number of the reply equals the sum), group size, response length, temperature,
learning rate (constant, no warm-up), AdamW settings, gradient clipping, no KL, one optimizer
step per rollout, and threads; they run at the same time with --threads each (2 cores: 1 and 1),
so machine drift hits both. Per step: seconds, and its parts (furlong: generation, old-policy
log-probs, training, weight sync from its metrics; TRL: generation, timed around
`model.generate`, and the rest). After the same number of steps both final models are scored
by one evaluator (furlong generate, greedy, 16 tokens, the run's dtype) on the 128 held-out
prompts. Writes bench/results/rl_vs_trl_bench.json with the CPU's features.

  .venv/bin/python bench/rl_vs_trl_bench.py [--build-dir build] [--steps 8] [--dtype bf16 fp32]

TRL is installed into .venv on first use (bench/requirements-trl.txt).
"""
import argparse
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / ".cache" / "models" / "smollm2-135m-instruct"
PY = sys.executable
SETTINGS = {"prompts_per_step": 8, "group": 8, "max_new_tokens": 16, "temperature": 1.0,
            "lr": 1e-5, "adam_beta1": 0.9, "adam_beta2": 0.95, "adam_eps": 1e-8,
            "clip_grad": 1.0, "seed": 1}


def final_number_correct(text, label):
    nums = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return bool(nums) and float(nums[-1].replace(",", "")) == float(label)


def cpu_features():
    flags = ""
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = line
                break
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                  if l.startswith("model name")), platform.processor())
    wanted = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]
    return {"model": model, "cores": os.cpu_count(),
            "features": [f for f in wanted if re.search(rf"\b{f}\b", flags)]}


def ensure_trl():
    try:
        import trl  # noqa: F401
    except ImportError:
        subprocess.run([PY, "-m", "pip", "install", "-q", "-r",
                        str(ROOT / "bench" / "requirements-trl.txt")], check=True)


def furlong_cmd(build, data, work, dtype, steps, threads):
    s = SETTINGS
    return [str(build / "furlong"), "train", "--hf-checkpoint", str(MODEL),
            "--prompt-data", str(data / "train.jsonl"), "--input-key", "prompt",
            "--label-key", "label", "--apply-chat-template", "--rm-type", "final_number",
            "--rollout-shuffle", "--rollout-batch-size", str(s["prompts_per_step"]),
            "--n-samples-per-prompt", str(s["group"]), "--num-rollout", str(steps),
            "--rollout-max-response-len", str(s["max_new_tokens"]),
            "--rollout-temperature", str(s["temperature"]), "--advantage-estimator", "grpo",
            "--lr", str(s["lr"]), "--adam-beta1", str(s["adam_beta1"]),
            "--adam-beta2", str(s["adam_beta2"]), "--adam-eps", str(s["adam_eps"]),
            "--clip-grad", str(s["clip_grad"]), "--compute-dtype",
            "bfloat16" if dtype == "bf16" else "float32", "--colocate",
            "--num-threads", str(threads), "--rollout-seed", str(s["seed"]),
            "--save", str(work / "ckpt"), "--save-interval", str(steps),
            "--metrics-file", str(work / "metrics.jsonl")]


def furlong_parts(work):
    rows = [json.loads(l) for l in open(work / "metrics.jsonl")]
    rows = rows[1:] if len(rows) > 2 else rows  # the first step warms caches up
    def med(key):
        return statistics.median(r.get(key, 0.0) for r in rows)
    train = med("perf/train_time")
    old = med("perf/log_probs_time")
    return {"step_s": med("perf/step_time") + med("perf/update_weights_time"),
            "generation_s": med("perf/rollout_time"), "old_logprobs_s": old,
            "train_s": train - old, "weight_sync_s": med("perf/update_weights_time"),
            "mean_reward": [r["rollout/raw_reward"] for r in rows]}


def export_furlong(build, work):
    out = work / "exported"
    subprocess.run([str(build / "furlong"), "export-hf", "--load", str(work / "ckpt"),
                    "--out", str(out)], check=True, capture_output=True)
    return out


def evaluate(build, model_dir, data, dtype, work, threads):
    rows = [json.loads(l) for l in open(data / "eval.jsonl")]
    prompts = work / "eval_prompts.jsonl"
    with open(prompts, "w") as f:
        for r in rows:
            f.write(json.dumps({"messages": r["prompt"]}) + "\n")
    out = work / "eval_out.jsonl"
    subprocess.run([str(build / "furlong"), "generate", "--hf-checkpoint", str(model_dir),
                    "--input", str(prompts), "--output", str(out), "--temperature", "0",
                    "--max-new-tokens", str(SETTINGS["max_new_tokens"]), "--dtype",
                    "bfloat16" if dtype == "bf16" else "float32", "--num-threads", str(threads)],
                   check=True, capture_output=True)
    outs = [json.loads(l) for l in open(out)]
    right = sum(final_number_correct(o["text"], r["label"]) for o, r in zip(outs, rows))
    return right / len(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dtype", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    build = (ROOT / args.build_dir).resolve()
    ensure_trl()
    base = ROOT / "out" / "rl_vs_trl"
    data = base / "data"
    subprocess.run([PY, str(ROOT / "examples" / "smollm2" / "make_addition_data.py"), str(data)],
                   check=True)
    results = {"settings": SETTINGS, "steps": args.steps, "threads_each": args.threads,
               "machine": cpu_features(), "date": time.strftime("%Y-%m-%d"), "cells": []}
    base_acc = None
    for dtype in args.dtype:
        fw, tw = base / f"furlong_{dtype}", base / f"trl_{dtype}"
        for d in (fw, tw):
            subprocess.run(["rm", "-rf", str(d)], check=True)
            d.mkdir(parents=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), FURLONG_NO_PROGRESS="1")
        f_cmd = furlong_cmd(build, data, fw, dtype, args.steps, args.threads)
        f = subprocess.Popen(f_cmd,
                             env=env, stdout=open(fw / "log", "w"), stderr=subprocess.STDOUT)
        t = subprocess.Popen([PY, str(ROOT / "bench" / "trl_grpo_side.py"), str(MODEL),
                              str(data), str(tw), dtype, str(args.steps), str(args.threads),
                              json.dumps(SETTINGS)],
                             env=env, stdout=open(tw / "log", "w"), stderr=subprocess.STDOUT)
        if f.wait() != 0 or t.wait() != 0:
            sys.exit(f"a side failed: see {fw / 'log'} and {tw / 'log'}")
        fp, tp = furlong_parts(fw), json.load(open(tw / "result.json"))
        if base_acc is None:
            base_acc = evaluate(build, MODEL, data, "fp32", base, 2)
        f_acc = evaluate(build, export_furlong(build, fw), data, dtype, fw, 2)
        t_acc = evaluate(build, tw / "model", data, dtype, tw, 2)
        cell = {"dtype": dtype,
                "furlong": {**fp, "heldout_accuracy": f_acc,
                            "flags": [a for a in f_cmd[2:] if a.startswith("--")]},
                "trl": {**tp, "heldout_accuracy": t_acc},
                "step_ratio_trl_over_furlong": tp["step_s"] / fp["step_s"]}
        results["cells"].append(cell)
        print(f"{dtype}: furlong {fp['step_s']:.1f} s/step (gen {fp['generation_s']:.1f}, "
              f"old logp {fp['old_logprobs_s']:.1f}, train {fp['train_s']:.1f}, sync "
              f"{fp['weight_sync_s']:.2f}); TRL {tp['step_s']:.1f} s/step (gen "
              f"{tp['generation_s']:.1f}); ratio {cell['step_ratio_trl_over_furlong']:.2f}x; "
              f"held-out after {args.steps} steps: furlong {f_acc:.3f}, TRL {t_acc:.3f}",
              flush=True)
    results["base_heldout_accuracy_fp32"] = base_acc
    out = ROOT / "bench" / "results" / "rl_vs_trl_bench.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"base held-out accuracy (fp32) {base_acc:.3f}; wrote {out}")


if __name__ == "__main__":
    main()
