#!/usr/bin/env python3
"""End-to-end RL step breakdown: `furlong train` (GRPO) on the demo model and a ~100M Qwen3,
colocated and disaggregated, a few rollouts each; per step the time of rollout (generation +
rewards), training and weight sync, and the weight sync's throughput against this machine's
memcpy bandwidth for the same number of bytes. Writes bench/results/rl_bench.json.

Goals (issue 5): weight sync under 10% of the step time; colocated sync at >= 50% of memcpy
bandwidth. The first rollout of each run is left out (warm-up); figures are medians.

  .venv/bin/python bench/rl_bench.py [--build-dir build] [--rollouts 5] [--quick]

--colocated-scaling runs only the colocated rollout-throughput scenario (issue 10): the same
rollouts on 1 rank with 1 thread, on 2 ranks with 1 thread each (one engine per rank, each
serving half of the prompt groups), and on 1 rank with 2 threads (the same cores as 2 ranks);
it writes bench/results/rl_bench_colocated_scaling.json.

--async-overlap runs only the one-step-off-policy scenario (issue 13): the same GRPO workload
on 2 training ranks and 1 engine server (1 thread each) with the synchronous loop and with
--train-async; per-rollout wall time (perf/iteration_time, median over rollouts after the
first two) of both, and overlap = (sync - async) / min(rollout, train) with the synchronous
run's medians (1 = the shorter phase is hidden entirely, 0 = no gain). It writes
bench/results/rl_bench_async.json.
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


def cpu_features():
    """The CPU's model name and the SIMD flags that decide the kernels' speed."""
    info = {"model": platform.processor() or platform.machine(), "simd": []}
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            info["model"] = value.strip()
        elif key.strip() == "flags":
            wanted = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                      "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
            info["simd"] = [f for f in value.split() if f in wanted]
            break
    return info


def accepts_flag(furlong, flag):
    out = subprocess.run([str(furlong), "train", "--help"], capture_output=True, text=True)
    return flag in out.stdout + out.stderr


def scaling_run(furlong, model, data, work, nproc, threads, rollouts, rbs, n, max_len,
                rollout_only):
    """One colocated run; rollout throughput from its metrics (the first rollout left out)."""
    tag = f"{model.name}-colocated-{nproc}r{threads}t"
    metrics = work / f"{tag}.metrics.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [str(furlong)]
    if nproc > 1:
        cmd += ["launch", "--nproc-per-node", str(nproc), "--", str(furlong)]
    cmd += ["train", "--hf-checkpoint", str(model), "--prompt-data", str(data),
            "--label-key", "label", "--rm-type", "exact_match", "--rollout-skip-special-tokens",
            "--rollout-batch-size", str(rbs), "--n-samples-per-prompt", str(n),
            "--num-rollout", str(rollouts), "--rollout-max-response-len", str(max_len),
            "--lr", "1e-4", "--compute-dtype", "float32",
            "--micro-batch-size", str(rbs * n // nproc), "--metrics-file", str(metrics),
            "--num-threads", str(threads), "--engine-num-threads", str(threads), "--colocate"]
    if rollout_only:
        cmd.append("--debug-rollout-only")
    env = dict(os.environ, FURLONG_NO_PROGRESS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{tag} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    layout = next((line.split("rollout engines: ", 1)[1] for line in proc.stdout.splitlines()
                   + proc.stderr.splitlines() if "rollout engines: " in line), "")
    rows = [json.loads(line) for line in open(metrics)][1:]
    seconds = [r["perf/rollout_time"] for r in rows]
    tokens = [r["rollout/response_len/mean"] * rbs * n for r in rows]
    rollout_s = statistics.median(seconds)
    row = {"ranks": nproc, "threads_per_rank": threads, "engines_layout": layout,
           "rollouts_measured": len(rows), "samples_per_rollout": rbs * n,
           "rollout_s": rollout_s, "rollout_s_all": seconds,
           "samples_per_s": rbs * n / rollout_s,
           "tokens_per_s": statistics.median(t / s for t, s in zip(tokens, seconds)),
           "response_tokens_per_rollout": statistics.median(tokens)}
    print(f"  {nproc} rank(s) x {threads} thread(s): rollout {rollout_s:7.3f}s  "
          f"{row['samples_per_s']:7.2f} samples/s  {row['tokens_per_s']:8.1f} tokens/s  "
          f"[{layout}]", flush=True)
    return row


def colocated_scaling(furlong, work, data, args):
    if args.quick:
        model, rbs, n, max_len = (init_model(furlong, "demo", DEMO_CONFIG,
                                             ROOT / "examples/tokenizers/arith", work), 16, 8, 16)
    else:
        big = json.loads((ROOT / "bench/configs/qwen3_100m.json").read_text())
        model = init_model(furlong, "qwen3_100m", big, ROOT / ".cache/tokenizers/qwen3", work)
        rbs, n, max_len = 8, 8, 16
    rollout_only = accepts_flag(furlong, "debug-rollout-only")
    print(f"Colocated rollout throughput, {model.name}, {rbs} prompts x {n} samples, "
          f"<= {max_len} tokens each ({'rollouts only' if rollout_only else 'with training'}):")
    one = scaling_run(furlong, model, data, work, 1, 1, args.rollouts, rbs, n, max_len,
                      rollout_only)
    two = scaling_run(furlong, model, data, work, 2, 1, args.rollouts, rbs, n, max_len,
                      rollout_only)
    one_wide = scaling_run(furlong, model, data, work, 1, 2, args.rollouts, rbs, n, max_len,
                           rollout_only)
    ratios = {"2_ranks_1_thread_vs_1_rank_1_thread": two["tokens_per_s"] / one["tokens_per_s"],
              "1_rank_2_threads_vs_1_rank_1_thread":
                  one_wide["tokens_per_s"] / one["tokens_per_s"],
              "2_ranks_1_thread_vs_1_rank_2_threads":
                  two["tokens_per_s"] / one_wide["tokens_per_s"]}
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}x")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.machine(),
            "cpus": os.cpu_count(), "cpu": cpu_features(), "model": model.name,
            "rollout_only": rollout_only,
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                     capture_output=True, text=True).stdout.strip(),
            "notes": "CPU only: one rank stands for one GPU. Rollout throughput = response tokens "
                     "of a rollout / its perf/rollout_time (generation + grading), median over "
                     "the rollouts after the first. The machine was shared with other builds: "
                     "read the ratios, not the absolute figures."}
    out = ROOT / "bench" / "results" / "rl_bench_colocated_scaling.json"
    out.write_text(json.dumps({"meta": meta, "results": [one, two, one_wide],
                               "ratios": ratios}, indent=1) + "\n")
    print(f"wrote {out}")


def async_run(furlong, model, data, work, train_async, rollouts, rbs, n, max_len):
    """One run on 2 ranks + 1 engine server, 1 thread each; medians over rollouts 2..."""
    tag = f"{model.name}-{'async' if train_async else 'sync'}"
    metrics = work / f"{tag}.metrics.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [str(furlong), "launch", "--nproc-per-node", "2", "--", str(furlong), "train",
           "--hf-checkpoint", str(model), "--prompt-data", str(data), "--label-key", "label",
           "--rm-type", "exact_match", "--rollout-skip-special-tokens",
           "--rollout-batch-size", str(rbs), "--n-samples-per-prompt", str(n),
           "--num-rollout", str(rollouts), "--rollout-max-response-len", str(max_len),
           "--rollout-temperature", "1.0", "--lr", "1e-4", "--use-tis",
           "--compute-dtype", "float32", "--micro-batch-size", str(rbs * n // 2),
           "--metrics-file", str(metrics), "--num-threads", "1", "--engine-num-threads", "1",
           "--rollout-num-engines", "1"] + (["--train-async"] if train_async else [])
    env = dict(os.environ, FURLONG_NO_PROGRESS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{tag} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in open(metrics)][2:]
    med = lambda k: statistics.median(r[k] for r in rows)
    row = {"mode": "async" if train_async else "sync", "rollouts_measured": len(rows),
           "samples_per_rollout": rbs * n, "step_s": med("perf/iteration_time"),
           "step_s_all": [r["perf/iteration_time"] for r in rows],
           "rollout_s": med("perf/rollout_time"), "train_s": med("perf/train_time"),
           "update_weights_s": med("perf/update_weights_time"),
           "staleness_max": max(r.get("train/staleness_max", 0) for r in rows),
           "raw_reward_first": rows[0]["rollout/raw_reward"],
           "raw_reward_last": rows[-1]["rollout/raw_reward"]}
    print(f"  {row['mode']:5s} step {row['step_s']:7.3f}s  rollout {row['rollout_s']:7.3f}s  "
          f"train {row['train_s']:7.3f}s  staleness {row['staleness_max']:.0f}", flush=True)
    return row


def async_overlap(furlong, work, data, args):
    model = init_model(furlong, "demo", DEMO_CONFIG, ROOT / "examples/tokenizers/arith", work)
    rbs, n, max_len = 8, 8, 16
    rollouts = max(args.rollouts, 8)
    print(f"Sync vs --train-async, {model.name}, 2 ranks + 1 engine server (1 thread each), "
          f"{rbs} prompts x {n} samples, <= {max_len} tokens:")
    sync = async_run(furlong, model, data, work, False, rollouts, rbs, n, max_len)
    asyn = async_run(furlong, model, data, work, True, rollouts, rbs, n, max_len)
    hideable = min(sync["rollout_s"], sync["train_s"])
    overlap = (sync["step_s"] - asyn["step_s"]) / hideable if hideable > 0 else 0.0
    print(f"  async / sync step time {asyn['step_s'] / sync['step_s']:.2f}, "
          f"overlap {overlap:.2f} of the shorter phase")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.machine(),
            "cpus": os.cpu_count(), "cpu": cpu_features(), "model": model.name,
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                     capture_output=True, text=True).stdout.strip(),
            "notes": "CPU only: the engine server and both trainer ranks (1 thread each) share "
                     "this machine's cores, so generation and training also compete for them. "
                     "step = perf/iteration_time (the loop's wall time per rollout), medians "
                     "over rollouts after the first two; overlap = (sync step - async step) / "
                     "min(sync rollout, sync train)."}
    out = ROOT / "bench" / "results" / "rl_bench_async.json"
    out.write_text(json.dumps({"meta": meta, "results": [sync, asyn],
                               "async_over_sync_step": asyn["step_s"] / sync["step_s"],
                               "overlap": overlap}, indent=1) + "\n")
    print(f"wrote {out}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default="build")
    p.add_argument("--rollouts", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--quick", action="store_true", help="demo model only")
    p.add_argument("--colocated-scaling", action="store_true",
                   help="only the colocated 1 vs 2 rank rollout-throughput scenario")
    p.add_argument("--async-overlap", action="store_true",
                   help="only the sync vs --train-async step-time scenario (2 ranks, 1 engine)")
    args = p.parse_args()
    build = (ROOT / args.build_dir).resolve()
    furlong = build / "furlong"
    work = build / "bench_rl"
    work.mkdir(parents=True, exist_ok=True)
    data = prompts(work)
    if args.colocated_scaling:
        colocated_scaling(furlong, work, data, args)
        return
    if args.async_overlap:
        async_overlap(furlong, work, data, args)
        return
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
