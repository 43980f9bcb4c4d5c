#!/usr/bin/env bash
# Demo of multi-turn agent RL (docs/agents.md): a tiny random Qwen3 learns, by GRPO against the
# reference calculator env, to call the `calculator` tool. About 30 s on 2 CPU cores.
#   bash examples/agent_env/demo.sh [BUILD_DIR] [WORK_DIR]
# Prints the per-rollout raw reward and tool calls per episode; the files stay in WORK_DIR.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
work="${2:-$(mktemp -d /tmp/furlong-agent-demo.XXXXXX)}"
python="${PYTHON:-python3}"
mkdir -p "$work"
furlong="$build/furlong"
[ -x "$furlong" ] || { echo "no $furlong: build first (make build)" >&2; exit 1; }

# The tiny model of the e2e tests, with turns ending on <|im_end|> (id 19).
cat > "$work/model.config.json" <<'JSON'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 32,
 "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64, "rope_theta": 10000.0,
 "tie_word_embeddings": true, "eos_token_id": 19}
JSON
"$furlong" init-model --config "$work/model.config.json" --tokenizer "$root/examples/agent_env/tokenizer" \
  --out "$work/model" --seed 7 --dtype float32 >/dev/null 2>&1
"$python" - "$work/prompts.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        f.write(json.dumps({"input": f"{a}*{b}=", "label": str(a * b)}) + "\n")
PY

rm -f "$work/env.port"
"$python" "$root/examples/agent_env/calculator_env.py" --port 0 --port-file "$work/env.port" \
  --call-reward 1 >"$work/env.log" 2>&1 &
env_pid=$!
trap 'kill "$env_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$work/env.port" ] && break; sleep 0.1; done
[ -s "$work/env.port" ] || { echo "the calculator env did not start (see $work/env.log)" >&2; exit 1; }
port="$(cat "$work/env.port")"

"$furlong" train --hf-checkpoint "$work/model" --prompt-data "$work/prompts.jsonl" \
  --input-key input --label-key label --apply-chat-template \
  --agent-env-url "http://127.0.0.1:$port" --agent-max-turns 2 --agent-max-episode-tokens 40 \
  --rollout-max-response-len 12 --rollout-stop-token-ids 21 --rollout-shuffle \
  --rollout-batch-size 8 --n-samples-per-prompt 8 --global-batch-size 64 --num-rollout 16 \
  --advantage-estimator grpo --lr 1e-2 --adam-beta2 0.99 --compute-dtype float32 \
  --micro-batch-size 16 --num-threads 1 --engine-num-threads 1 --colocate \
  --metrics-file "$work/metrics.jsonl" >"$work/train.log" 2>&1 ||
  { echo "furlong train failed (see $work/train.log)" >&2; exit 1; }

"$python" - "$work/metrics.jsonl" <<'PY'
import json, sys
print("rollout  raw_reward  tool_calls/episode  turns/episode")
for i, line in enumerate(open(sys.argv[1])):
    r = json.loads(line)
    print(f"{i:7d}  {r['rollout/raw_reward']:10.3f}  {r['rollout/agent/tool_calls']:18.2f}"
          f"  {r['rollout/agent/turns']:13.2f}")
PY
echo "files in $work"
