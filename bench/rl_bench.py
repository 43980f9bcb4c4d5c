#!/usr/bin/env python3
"""End-to-end RL step breakdown: `furlong train` (GRPO) on the demo model and a ~100M Qwen3,
colocated and disaggregated, a few rollouts each; per step the time of rollout (generation +
rewards), training and weight sync, and the weight sync's throughput against this machine's
memcpy bandwidth for the same number of bytes. Writes bench/results/rl_bench.json.

Goals (issue 5): weight sync under 10% of the step time; colocated sync at >= 50% of memcpy
bandwidth. The first rollout of each run is left out (warm-up); figures are medians.

  .venv/bin/python bench/rl_bench.py [--build-dir build] [--rollouts 5] [--quick]
"""
import argparse
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEMO_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 32,
    "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 128, "rope_theta": 10000.0, "tie_word_embeddings": True,
    "eos_token_id": 17}


def init_model(furlong, name, config, tokenizer, work):
    out = work / name
    if (out / "config.json").exists():
        return out
    cfg = work / f"{name}.config.json"
    cfg.write_text(json.dumps(config))
    subprocess.run([str(furlong), "init-model", "--config", str(cfg), "--tokenizer",
                    str(tokenizer), "--out", str(out), "--seed", "1", "--dtype", "float32"],
                   check=True, capture_output=True)
    return out


def prompts(work):
    path = work / "prompts.jsonl"
    with open(path, "w") as f:
        for a in range(10):
            for b in range(10):
                f.write(json.dumps({"input": f"{a}+{b}=", "label": str(a + b)}) + "\n")
    return path


def memcpy_gbps(nbytes, threads, repeats=5):
    """Copy bandwidth (GB/s) of torch's `dst.copy_(src)` (ATen's parallel copy, `threads`
    threads, destination pages already touched) for nbytes, best of `repeats`: the cost of the
    one copy a weight sync cannot avoid."""
    import torch
    torch.set_num_threads(max(threads, 1))
    src = torch.ones(max(nbytes, 1), dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def run(furlong, model, data, work, layout, rollouts, rbs, n, max_len, threads):
    tag = f"{model.name}-{layout}"
    metrics = work / f"{tag}.metrics.jsonl"
    cmd = [str(furlong), "train", "--hf-checkpoint", str(model), "--prompt-data", str(data),
           "--label-key", "label", "--rm-type", "exact_match", "--rollout-skip-special-tokens",
           "--rollout-batch-size", str(rbs), "--n-samples-per-prompt", str(n),
           "--num-rollout", str(rollouts), "--rollout-max-response-len", str(max_len),
           "--lr", "1e-4", "--compute-dtype", "float32", "--micro-batch-size", str(rbs * n),
           "--metrics-file", str(metrics), "--num-threads", str(threads)]
    cmd += ["--colocate"] if layout == "colocated" else [
        "--rollout-num-engines", "1", "--engine-num-threads", str(threads)]
    env = dict(os.environ, FURLONG_NO_PROGRESS="1")
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    rows = [json.loads(line) for line in open(metrics)][1:]  # skip the warm-up rollout
    med = lambda k: statistics.median(r[k] for r in rows)
    rollout, train, sync = med("perf/rollout_time"), med("perf/train_time"), med(
        "perf/update_weights_time")
    step = rollout + train + sync
    nbytes = int(rows[-1]["perf/update_weights_bytes"])
    sync_gbps = nbytes / sync / 1e9 if sync > 0 else float("inf")
    copy_gbps = memcpy_gbps(nbytes, threads)
    row = {"model": model.name, "layout": layout, "rollouts_measured": len(rows),
           "samples_per_rollout": rbs * n, "rollout_s": rollout, "train_s": train,
           "update_weights_s": sync, "step_s": step,
           "update_weights_fraction": sync / step, "update_weights_bytes": nbytes,
           "update_weights_gbps": sync_gbps, "memcpy_gbps": copy_gbps,
           "sync_vs_memcpy": sync_gbps / copy_gbps}
    print(f"  {model.name:8s} {layout:13s} rollout {rollout:7.3f}s  train {train:7.3f}s  "
          f"sync {sync:7.4f}s ({100 * sync / step:4.1f}% of step)  "
          f"{nbytes / 2**20:8.1f} MiB at {sync_gbps:6.2f} GB/s = "
          f"{100 * sync_gbps / copy_gbps:5.1f}% of memcpy", flush=True)
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default="build")
    p.add_argument("--rollouts", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--quick", action="store_true", help="demo model only")
    args = p.parse_args()
    build = (ROOT / args.build_dir).resolve()
    furlong = build / "furlong"
    work = build / "bench_rl"
    work.mkdir(parents=True, exist_ok=True)
    data = prompts(work)
    demo = init_model(furlong, "demo", DEMO_CONFIG, ROOT / "examples/tokenizers/arith", work)
    runs = [(demo, 16, 8, 4)]
    if not args.quick:
        big = json.loads((ROOT / "bench/configs/qwen3_100m.json").read_text())
        m100 = init_model(furlong, "qwen3_100m", big, ROOT / ".cache/tokenizers/qwen3", work)
        runs.append((m100, 4, 4, 16))
    print("RL step breakdown (medians over rollouts after the first):")
    rows = []
    for model, rbs, n, max_len in runs:
        for layout in ("colocated", "disaggregated"):
            rows.append(run(furlong, model, data, work, layout, args.rollouts, rbs, n, max_len,
                            args.threads))
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.machine(),
            "cpus": os.cpu_count(), "threads": args.threads,
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                     capture_output=True, text=True).stdout.strip(),
            "notes": "CPU only; memcpy = torch copy_ of the synced bytes with the same threads; "
                     "disaggregated sync = Gloo broadcast over loopback to one engine process. "
                     "Shared, noisy machine: compare within one run."}
    out = ROOT / "bench" / "results" / "rl_bench.json"
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
