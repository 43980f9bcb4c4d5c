#!/usr/bin/env python3
"""Side-by-side benchmarks: furlong against its Python peer, same machine, model, data and
thread count, in one run. Runs alternate between the two (furlong first on even rounds, the
peer first on odd ones) so slow drift on a noisy machine hits both; each figure is the median
over rounds of each run's median step time. Prints a table and writes bench/results/*.json.

  .venv/bin/python bench/run_all.py [--build-dir build] [--only model] [--rounds 3] [--quick]
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ensure_model(name, build_dir):
    """Creates a random-weight HF directory for bench/configs/<name>.json (cached)."""
    out = build_dir / "bench_models" / name
    if (out / "config.json").exists():
        return out
    code = (
        "import json,sys,torch\n"
        "from transformers import AutoConfig, AutoModelForCausalLM\n"
        "cfg=json.load(open(sys.argv[1])); torch.manual_seed(0)\n"
        "c=AutoConfig.for_model(cfg.pop('model_type'), **{k:v for k,v in cfg.items() if k!='architectures'})\n"
        "AutoModelForCausalLM.from_config(c).save_pretrained(sys.argv[2])\n")
    subprocess.run([PY, "-c", code, str(ROOT / "bench" / "configs" / f"{name}.json"), str(out)],
                   check=True, capture_output=True)
    return out


def side_by_side(furlong_cmd, peer_cmd, rounds, env):
    results = {"furlong": [], "peer": []}
    for r in range(rounds):
        order = [("furlong", furlong_cmd), ("peer", peer_cmd)]
        if r % 2:
            order.reverse()
        for name, cmd in order:
            results[name].append(run_json(cmd, env))
    fl = statistics.median(x["median_s"] for x in results["furlong"])
    peer = statistics.median(x["median_s"] for x in results["peer"])
    return fl, peer, results


def bench_models(args, build_dir, env):
    rows = []
    models = ["qwen3_tiny"] if args.quick else ["qwen3_tiny", "qwen3_100m"]
    for model in models:
        model_dir = ensure_model(model, build_dir)
        for dtype in ["float32", "bfloat16"]:
            for mode in ["train", "score"]:
                common = ["--hf-checkpoint", str(model_dir), "--mode", mode, "--dtype", dtype,
                          "--docs", str(args.docs), "--doc-len", str(args.doc_len),
                          "--iters", str(args.iters), "--warmup", "1",
                          "--threads", str(args.threads)]
                fl_cmd = [str(build_dir / "bench" / "furlong_model_bench")] + common
                peer_cmd = [PY, str(ROOT / "bench" / "hf_model_bench.py")] + common
                fl, peer, raw = side_by_side(fl_cmd, peer_cmd, args.rounds, env)
                tokens = args.docs * args.doc_len
                rows.append({"model": model, "dtype": dtype, "mode": mode, "tokens": tokens,
                             "furlong_s": fl, "transformers_s": peer,
                             "furlong_tokens_per_s": tokens / fl,
                             "transformers_tokens_per_s": tokens / peer,
                             "speedup": peer / fl, "raw": raw})
                print(f"  {model:11s} {dtype:8s} {mode:5s}  furlong {tokens / fl:9.0f} tok/s   "
                      f"transformers {tokens / peer:9.0f} tok/s   x{peer / fl:.2f}", flush=True)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default="build")
    p.add_argument("--only", default="all", choices=["all", "model"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--docs", type=int, default=8)
    p.add_argument("--doc-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--quick", action="store_true", help="tiny model only, for a smoke run")
    args = p.parse_args()
    build_dir = (ROOT / args.build_dir).resolve()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), FURLONG_NO_PROGRESS="1")
    results_dir = ROOT / "bench" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.processor() or
            platform.machine(), "cpus": os.cpu_count(), "threads": args.threads,
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                     capture_output=True, text=True).stdout.strip(),
            "rounds": args.rounds}
    if args.only in ("all", "model"):
        print("model forward+backward (train) and scoring, tokens/s (higher is better):")
        rows = bench_models(args, build_dir, env)
        out = results_dir / "model_bench.json"
        out.write_text(json.dumps({"meta": meta, "results": rows}, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
