#!/usr/bin/env python3
"""The real-model demo's task: two-digit addition, answered with the number alone.

Usage: make_addition_data.py OUT_DIR [--eval N] [--seed S]

Writes OUT_DIR/train.jsonl and OUT_DIR/eval.jsonl, rows {"prompt": [chat messages], "label":
"<sum>"}. Every pair (a, b) with 10 <= a, b <= 99 appears once in all; N of them (seeded) are
held out for eval and never trained on. The prompt asks for the number only, which SmolLM2-135M
gets right about a fifth of the time: it often answers with a wrong sum or a sentence, so a
"final number" reward has both signal and room.
"""
import argparse
import json
import os
import random


def prompt(a, b):
    return [{"role": "user", "content": f"What is {a} + {b}? Reply with only the number."}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--eval", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(args.seed).shuffle(pairs)
    os.makedirs(args.out_dir, exist_ok=True)
    splits = {"eval.jsonl": pairs[:args.eval], "train.jsonl": pairs[args.eval:]}
    for name, rows in splits.items():
        with open(os.path.join(args.out_dir, name), "w") as f:
            for a, b in rows:
                f.write(json.dumps({"prompt": prompt(a, b), "label": str(a + b)}) + "\n")


if __name__ == "__main__":
    main()
