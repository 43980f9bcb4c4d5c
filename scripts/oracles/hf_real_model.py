#!/usr/bin/env python3
"""transformers on a real HF model directory: the oracle of tests/e2e/real_model_test.cpp.

Usage: hf_real_model.py PLAN.json OUT.json

PLAN.json: {"model_dir": str, "conversations": [[{"role", "content"}, ...], ...],
            "max_new_tokens": int}
For each conversation, in fp32: the prompt ids of apply_chat_template(add_generation_prompt)
with the model's own tokenizer and template; greedy generate (the model's generation config,
eos included); then one forward over prompt + output, from which OUT.json takes, per generated
token, log softmax(logits)[token], the gap between the two largest logits (a greedy choice is
only as stable as this margin) and the logits' absolute scale max_j sum_k |h_k W_jk| (what a
GEMM's rounding error is proportional to).
OUT.json: {"cases": [{"prompt_ids", "output_ids", "logprobs", "margins", "abs_scale"}, ...]}
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    plan = json.load(open(sys.argv[1]))
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(plan["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(plan["model_dir"], dtype=torch.float32).eval()
    head = model.get_output_embeddings().weight
    cases = []
    for messages in plan["conversations"]:
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=plan["max_new_tokens"])[0, len(prompt):].tolist()
            full = torch.tensor([prompt + out])
            res = model(full, output_hidden_states=True)
        logits = res.logits[0, len(prompt) - 1:-1].float()
        hidden = res.hidden_states[-1][0, len(prompt) - 1:-1].float()
        lp = torch.log_softmax(logits, -1)
        top2 = logits.topk(2, -1).values
        cases.append({
            "prompt_ids": prompt,
            "output_ids": out,
            "logprobs": [lp[i, t].item() for i, t in enumerate(out)],
            "margins": (top2[:, 0] - top2[:, 1]).tolist(),
            "abs_scale": (hidden.abs() @ head.abs().t()).max().item(),
        })
    json.dump({"cases": cases}, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
