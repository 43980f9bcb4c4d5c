#!/usr/bin/env bash
# furlong's quick demo on a tiny random model (`make demo-tiny`), on CPU in a few minutes:
#   1. initialize a small Qwen3 (4 layers, d=128) with a 20-token arithmetic tokenizer,
#   2. generate a synthetic task: single-digit addition "a+b=" -> "a+b", checkable exactly,
#   3. warm the model up briefly with SFT (it learns the format and some of the sums),
#   4. run GRPO with furlong's rollout engine colocated in the trainer: 120 rollouts of 32
#      prompts x 8 samples, exact-match reward, and watch the mean reward rise,
#   5. print where the metrics, TensorBoard events and the HTML report are.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=out/demo-tiny
FURLONG=$BUILD/furlong
rm -rf "$OUT" && mkdir -p "$OUT"
export FURLONG_NO_PROGRESS=${FURLONG_NO_PROGRESS:-1}

cat > "$OUT/model_config.json" <<'JSON'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 32,
 "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
 "max_position_embeddings": 128, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "eos_token_id": 17}
JSON
echo "== 1. furlong init-model: a 4-layer Qwen3 with the arithmetic tokenizer"
$FURLONG init-model --config "$OUT/model_config.json" --tokenizer examples/tokenizers/arith \
  --out "$OUT/model" --seed 1 --dtype float32

echo "== 2. the task: a+b= for single digits (100 prompts; SFT pairs and RL prompts+labels)"
for a in 0 1 2 3 4 5 6 7 8 9; do
  for b in 0 1 2 3 4 5 6 7 8 9; do
    echo "{\"input\": \"$a+$b=\", \"response\": \"$((a + b))<|endoftext|>\"}" >> "$OUT/sft.jsonl"
    echo "{\"input\": \"$a+$b=\", \"label\": \"$((a + b))\"}" >> "$OUT/prompts.jsonl"
  done
done

echo "== 3. SFT warm-up: 125 steps of masked next-token loss (furlong train --loss-type sft)"
$FURLONG train --loss-type sft --hf-checkpoint "$OUT/model" --prompt-data "$OUT/sft.jsonl" \
  --rollout-shuffle --global-batch-size 20 --num-epoch 25 --lr 3e-3 --compute-dtype float32 \
  --micro-batch-size 20 --save "$OUT/sft_ckpt" --save-interval 1000 2>&1 | awk 'NR % 25 == 0'
$FURLONG export-hf --load "$OUT/sft_ckpt" --out "$OUT/sft_model"

echo "== 4. GRPO: 120 rollouts of 32 prompts x 8 samples, engine colocated in the trainer"
$FURLONG train --hf-checkpoint "$OUT/sft_model" --prompt-data "$OUT/prompts.jsonl" \
  --label-key label --rm-type exact_match --rollout-skip-special-tokens --rollout-shuffle \
  --rollout-batch-size 32 --n-samples-per-prompt 8 --num-rollout 120 \
  --rollout-max-response-len 4 --rollout-temperature 1.0 --advantage-estimator grpo \
  --lr 1e-3 --compute-dtype float32 --micro-batch-size 64 --colocate \
  --check-weight-update-equal --save "$OUT/rl_ckpt" --save-interval 60 \
  --metrics-file "$OUT/metrics.jsonl" --tensorboard-dir "$OUT/tensorboard" \
  --report "$OUT/report.html" > "$OUT/rl.log" 2>&1 || { tail -30 "$OUT/rl.log"; exit 1; }

.venv/bin/python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
print("\nrollout  mean reward  pass@8   ppo_kl  |logp engine - trainer|  rollout s  train s  sync s")
for r in rows:
    if r["step"] % 10 == 0 or r["step"] == len(rows) - 1:
        print(f"{r['step']:7d}  {r['rollout/raw_reward']:11.3f}  {r['passrate/pass@8']:6.3f}"
              f"  {r['train/ppo_kl']:7.1e}  {r['train/train_rollout_logprob_abs_diff']:22.1e}"
              f"  {r['perf/rollout_time']:9.2f}  {r['perf/train_time']:7.2f}"
              f"  {r['perf/update_weights_time']:6.3f}")
k = 10
first = sum(r["rollout/raw_reward"] for r in rows[:k]) / k
last = sum(r["rollout/raw_reward"] for r in rows[-k:]) / k
print(f"\nmean reward, first {k} rollouts: {first:.3f}   last {k} rollouts: {last:.3f}")
print(f"report:      {out}/report.html")
print(f"metrics:     {out}/metrics.jsonl  (TensorBoard: {out}/tensorboard)")
print(f"checkpoints: {out}/rl_ckpt  (furlong export-hf --load {out}/rl_ckpt --out DIR)")
PY
