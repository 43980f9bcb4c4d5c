#!/usr/bin/env python3
"""Oracle for SFT conversation rows: token ids and assistant loss mask from transformers.

    sft_conversation.py --tokenizer DIR --cases FILE --out FILE

FILE holds a JSON list of {name, messages, tools?, kwargs?}. For each case the whole
conversation goes through apply_chat_template(tokenize=True, add_generation_prompt=False,
return_dict=True) (jinja2), which gives the ids. The mask is derived in token space, not from
text offsets as furlong does: for every assistant message i (unless its step_loss_mask is not 1),
the ids of apply_chat_template(messages[:i]) must be a prefix of the ids; the turn starts after
the longest common prefix of the ids and those of apply_chat_template(messages[:i],
add_generation_prompt=True) (the role header, and a prefill such as Qwen3's empty thinking block
only where the conversation holds it too), and the mask is 1 from there through the first
special token (an added token with special=True, the tokens skip_special_tokens drops), 0
elsewhere.
Writes {name: {"text": ..., "ids": [...], "mask": [...]}}.
"""

import argparse
import json

from transformers import AutoTokenizer


def chat_ids(tok, messages, generation_prompt, extra):
    out = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt,
                                  return_dict=True, **extra)
    return list(out["input_ids"])


def trained(message):
    return message["role"] == "assistant" and message.get("step_loss_mask", 1) == 1


def assistant_mask(tok, messages, ids, extra):
    special = {i for i, t in tok.added_tokens_decoder.items() if t.special}
    mask = [0] * len(ids)
    for i, message in enumerate(messages):
        if not trained(message):
            continue
        history = chat_ids(tok, messages[:i], False, extra)
        assert ids[:len(history)] == history, f"messages[:{i}] is not a token prefix"
        prompted = chat_ids(tok, messages[:i], True, extra)
        k = 0
        while k < min(len(prompted), len(ids)) and prompted[k] == ids[k]:
            k += 1
        while True:
            mask[k] = 1
            if ids[k] in special:
                break
            k += 1
    return mask


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
        extra = dict(case.get("kwargs") or {})
        if case.get("tools"):
            extra["tools"] = case["tools"]
        messages = case["messages"]
        ids = chat_ids(tok, messages, False, extra)
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                       **extra)
        out[case["name"]] = {"text": text, "ids": ids,
                             "mask": assistant_mask(tok, messages, ids, extra)}
    with open(args.out, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
