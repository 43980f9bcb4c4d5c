#!/usr/bin/env python3
"""transformers' view of `furlong tokenize` rows, for the CLI tests.

Usage: hf_tokenize_rows.py TOKENIZER_DIR IN.jsonl OUT.jsonl [--add-special-tokens]
       [--add-generation-prompt]
Each input row {"text": ...} gets "input_ids" (tokenizer(text)["input_ids"]); a row with
"messages" gets "text" and "input_ids" from apply_chat_template (tokenize=False, then encoded
without special tokens, as apply_chat_template(tokenize=True) does).
"""
import json
import sys

from transformers import AutoTokenizer


def main():
    tok_dir, inp, out = sys.argv[1:4]
    flags = set(sys.argv[4:])
    tok = AutoTokenizer.from_pretrained(tok_dir)
    rows = [json.loads(line) for line in open(inp, encoding="utf-8") if line.strip()]
    with open(out, "w", encoding="utf-8") as f:
        for row in rows:
            if "messages" in row:
                text = tok.apply_chat_template(row["messages"], tools=row.get("tools"),
                                               tokenize=False,
                                               add_generation_prompt="--add-generation-prompt" in flags)
                row["text"] = text
                row["input_ids"] = tok(text, add_special_tokens=False)["input_ids"]
            else:
                row["input_ids"] = tok(row["text"],
                                       add_special_tokens="--add-special-tokens" in flags)["input_ids"]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
