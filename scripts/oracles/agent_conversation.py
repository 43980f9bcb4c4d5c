#!/usr/bin/env python3
"""Oracle for multi-turn agent episodes: whole conversations rendered by transformers.

    agent_conversation.py --tokenizer DIR --cases FILE --out FILE

FILE holds a JSON list of {name, messages, tools}. For each, the whole conversation (prompt,
assistant turns as plain content, observations) is rendered with apply_chat_template
(tokenize=False, add_generation_prompt=False; jinja2) and tokenized without special-token
insertion. Writes {name: {"text": ..., "ids": [...]}}; the C++ test checks that the tokens of
an episode (the prompt, each generated turn, each appended observation) are these ids.
"""

import argparse
import json

from transformers import AutoTokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--cases", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    with open(args.cases) as f:
        cases = json.load(f)
    out = {}
    for case in cases:
        extra = {"tools": case["tools"]} if case.get("tools") else {}
        text = tok.apply_chat_template(case["messages"], tokenize=False,
                                       add_generation_prompt=False, **extra)
        out[case["name"]] = {"text": text, "ids": tok.encode(text, add_special_tokens=False)}
    with open(args.out, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
