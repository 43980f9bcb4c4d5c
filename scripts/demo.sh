#!/usr/bin/env bash
# furlong's end-to-end demo (what `make demo` runs after building):
#   1. initialize a small Qwen3 model with the real Qwen3 tokenizer (no hub needed),
#   2. render chat conversations through the tokenizer's chat template and tokenize them,
#   3. score every token (log-prob and entropy) with the model, in C++ end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=out/demo
FURLONG=$BUILD/furlong
rm -rf "$OUT" && mkdir -p "$OUT"

cat > "$OUT/model_config.json" <<'JSON'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256,
 "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 4096,
 "rope_theta": 1000000.0, "tie_word_embeddings": true}
JSON
echo "== 1. furlong init-model: a 4-layer Qwen3 with the Qwen3 tokenizer"
$FURLONG init-model --config "$OUT/model_config.json" --tokenizer .cache/tokenizers/qwen3 \
  --out "$OUT/model" --seed 42 --dtype bfloat16

cat > "$OUT/chats.jsonl" <<'JSON'
{"messages": [{"role": "system", "content": "You are a careful math tutor."}, {"role": "user", "content": "What is 17 * 23?"}, {"role": "assistant", "content": "17 * 23 = 391."}]}
{"messages": [{"role": "user", "content": "Translate 'good morning' into French and Japanese."}, {"role": "assistant", "content": "Bonjour. おはようございます。"}]}
{"messages": [{"role": "user", "content": "Write a haiku about compilers 🛠️"}, {"role": "assistant", "content": "Tokens fall like rain\nparsed into a quiet tree\nthe binary wakes"}]}
JSON
echo "== 2. furlong tokenize --apply-chat-template"
$FURLONG tokenize --hf-checkpoint "$OUT/model" --apply-chat-template \
  --input "$OUT/chats.jsonl" --output "$OUT/tokens.jsonl"

echo "== 3. furlong score (bf16, packed rows)"
$FURLONG score --hf-checkpoint "$OUT/model" --input "$OUT/tokens.jsonl" \
  --output "$OUT/scores.jsonl"

python3 - "$OUT" <<'PY'
import json, math, sys
out = sys.argv[1]
tokens = [json.loads(l) for l in open(f"{out}/tokens.jsonl", encoding="utf-8")]
scores = [json.loads(l) for l in open(f"{out}/scores.jsonl")]
print("\nrow  tokens  mean log-prob  mean entropy  (an untrained model: ~uniform over 151k ids,")
print("                                           log(151936) = %.2f)" % math.log(151936))
for i, (t, s) in enumerate(zip(tokens, scores)):
    lp, ent = s["logprobs"], s["entropy"]
    print(f"{i:3d}  {len(t['input_ids']):6d}  {sum(lp)/len(lp):13.3f}  {sum(ent)/len(ent):12.3f}")
print(f"\nfirst rendered conversation:\n{tokens[0]['text']}")
print(f"outputs are in {out}/ (model/, tokens.jsonl, scores.jsonl)")
PY
