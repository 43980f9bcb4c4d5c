#!/usr/bin/env python3
"""What furlong's host-memory policy (src/core/host_memory.h) buys: the same FSDP training step
(bench/fsdp_bench.cpp, 2 ranks under torchrun, ~100M Qwen3, bf16) under three settings of the
furlong process, run side by side with the order rotating each round:

  defaults    FURLONG_HOST_MEMORY=default (libtorch and glibc as shipped)
  huge_pages  defaults + THP_MEM_ALLOC_ENABLE=1 MALLOC_MMAP_THRESHOLD_=2097152
  policy      furlong's policy as shipped (huge pages, mmap threshold, block cache)

Writes bench/results/host_memory_bench.json (median step seconds and peak RSS per setting).

  .venv/bin/python bench/host_memory_bench.py [--build-dir build] [--rounds 3] [--model qwen3_100m]
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_all import ROOT, ensure_model, run_json, torchrun  # noqa: E402

SETTINGS = {
    "defaults": {"FURLONG_HOST_MEMORY": "default"},
    "huge_pages": {"FURLONG_HOST_MEMORY": "default", "THP_MEM_ALLOC_ENABLE": "1",
                   "MALLOC_MMAP_THRESHOLD_": "2097152"},
    "policy": {},
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default="build")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model", default="qwen3_100m")
    p.add_argument("--dtype", default="bfloat16")
    a = p.parse_args()
    build_dir = (ROOT / a.build_dir).resolve()
    model_dir = ensure_model(a.model, build_dir)
    threads = max(1, (os.cpu_count() or 2) // 2)
    cmd = torchrun(2) + ["--no-python", str(build_dir / "bench" / "furlong_fsdp_bench"),
                         "--hf-checkpoint", str(model_dir), "--dtype", a.dtype, "--docs", "8",
                         "--doc-len", "128", "--iters", "3", "--warmup", "1",
                         "--threads", str(threads)]
    base = dict(os.environ, OMP_NUM_THREADS=str(threads), FURLONG_NO_PROGRESS="1")
    for k in ("FURLONG_HOST_MEMORY", "THP_MEM_ALLOC_ENABLE", "MALLOC_MMAP_THRESHOLD_"):
        base.pop(k, None)
    names = list(SETTINGS)
    runs = {n: [] for n in names}
    for r in range(a.rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            runs[n].append(run_json(cmd, dict(base, **SETTINGS[n])))
    rows = {n: {"median_step_s": statistics.median(x["median_s"] for x in runs[n]),
                "peak_rss_mib": max(x["peak_rss_bytes"] for x in runs[n]) / 2**20,
                "host_memory": runs[n][-1].get("host_memory"), "env": SETTINGS[n]}
            for n in names}
    for n in names:
        print(f"{n:11s} step {rows[n]['median_step_s']:.3f} s   peak RSS "
              f"{rows[n]['peak_rss_mib']:.0f} MiB   ({rows[n]['host_memory']})", flush=True)
    out = ROOT / "bench" / "results" / "host_memory_bench.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M:%S"), "model": a.model,
                               "dtype": a.dtype, "ranks": 2, "threads_per_rank": threads,
                               "rounds": a.rounds, "results": rows, "raw": runs}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
