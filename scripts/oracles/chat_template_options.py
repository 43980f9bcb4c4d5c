#!/usr/bin/env python3
"""Oracle for --apply-chat-template-kwargs and --chat-template-path (miles' meaning).

    chat_template_options.py --tokenizer DIR --template FILE --out FILE

Renders a few conversations with transformers' apply_chat_template(tokenize=False,
add_generation_prompt=True), which runs jinja2:
  - with the tokenizer's own template and extra kwargs (Qwen3's enable_thinking),
  - with the template of FILE (chat_template=..., what miles' --chat-template-path sets as
    tokenizer.chat_template), with and without extra kwargs.
Writes a JSON list of {name, messages, kwargs, custom_template, expected}; the C++ test renders
the same through data::PromptDataset and compares byte for byte.
"""

import argparse
import json

from transformers import AutoTokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--template", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    with open(args.template) as f:
        custom = f.read()
    conversations = {
        "one_user_turn": [{"role": "user", "content": "What is 2+3?"}],
        "system_and_user": [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "What is 7*6?"},
        ],
    }
    kwargs_cases = {"none": {}, "no_thinking": {"enable_thinking": False},
                    "thinking": {"enable_thinking": True}}
    cases = []
    for conv_name, messages in conversations.items():
        for kw_name, kwargs in kwargs_cases.items():
            for use_custom in (False, True):
                extra = {"chat_template": custom} if use_custom else {}
                text = tok.apply_chat_template(messages, tokenize=False,
                                               add_generation_prompt=True, **extra, **kwargs)
                cases.append({"name": f"{conv_name}/{kw_name}/{'custom' if use_custom else 'own'}",
                              "messages": messages, "kwargs": kwargs,
                              "custom_template": use_custom, "expected": text})
    with open(args.out, "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
