#!/usr/bin/env python3
"""Greedy generation with HF transformers, the oracle for furlong's engine parity tests.

Usage: hf_generate.py PLAN.json OUT_DIR

PLAN.json is a list of cases written by the C++ test:
  {"name": str, "config": {...HF config fields incl. "architectures", "model_type"...},
   "seed": int, "dtype": "float32" | "bfloat16", "attn": "sdpa" | "eager",
   "tokenizer_dir": str,               # tokenizer files copied next to the model
   "prompts": [[ids...], ...], "max_new_tokens": int}
Each case's model is created with transformers (seeded, norm weights and biases perturbed so
they matter), saved to OUT_DIR/<name>/model with the tokenizer files, and each prompt is run
alone through model.generate(do_sample=False) with eos disabled, so every output has exactly
max_new_tokens tokens. OUT_DIR/<name>/outputs.json: {"outputs": [[ids...], ...],
"logprobs": [[log softmax(logits)[token] in fp32 ...], ...]} (raw logits, temperature 1).
"""
import json
import os
import shutil
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def create_model(case, model_dir):
    torch.manual_seed(case["seed"])
    fields = {k: v for k, v in case["config"].items() if k not in ("architectures", "model_type")}
    config = AutoConfig.for_model(case["config"]["model_type"], **fields)
    config.architectures = case["config"]["architectures"]
    model = AutoModelForCausalLM.from_config(config, attn_implementation=case["attn"])
    model = model.to(torch.float32)
    gen = torch.Generator().manual_seed(case["seed"] + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    model.to(DTYPES[case["dtype"]]).save_pretrained(model_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(case["tokenizer_dir"], name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(model_dir, name))


def run_case(case, out_dir):
    case_dir = os.path.join(out_dir, case["name"])
    model_dir = os.path.join(case_dir, "model")
    create_model(case, model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[case["dtype"]],
                                                 attn_implementation=case["attn"])
    model.eval()
    outputs, logprobs = [], []
    for prompt in case["prompts"]:
        ids = torch.tensor([prompt], dtype=torch.long)
        with torch.no_grad():
            res = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=case["max_new_tokens"],
                                 min_new_tokens=case["max_new_tokens"], eos_token_id=None,
                                 pad_token_id=0, output_logits=True, return_dict_in_generate=True,
                                 top_k=None, top_p=None, temperature=None)
        new = res.sequences[0, len(prompt):].tolist()
        lps = []
        for step, tok in enumerate(new):
            lp = torch.log_softmax(res.logits[step][0].float(), dim=-1)[tok]
            lps.append(float(lp))
        outputs.append(new)
        logprobs.append(lps)
    with open(os.path.join(case_dir, "outputs.json"), "w") as f:
        json.dump({"outputs": outputs, "logprobs": logprobs}, f)


def main():
    plan_path, out_dir = sys.argv[1], sys.argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    for case in plan:
        run_case(case, out_dir)


if __name__ == "__main__":
    main()
