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

Mixture-of-experts models (Qwen3MoeForCausalLM): the router weights (mlp.gate.weight) are
redrawn with std 0.3 so that tokens pick clearly different experts, and outputs.json also has,
per prompt, the routing of the full sequence prompt + output as one forward without a cache
computes it (forward hooks on every sparse layer's router, mlp.gate):
  "routing": [T][L][K] expert ids in the router's order (descending probability), -1 in the
    rows of dense layers (T = prompt + output tokens, every token including the last);
  "routing_gap": [T][L] p_(K) - p_(K+1), the margin of the k-th choice (1 for dense layers);
  "router_abs_scale": max over sparse layers and tokens of sum_d |x_d W_ed| (the router logits'
    absolute scale, for rounding bounds).
"""
import json
import os
import re
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
            elif name.endswith("mlp.gate.weight"):  # MoE router [E, D]
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    model.to(DTYPES[case["dtype"]]).save_pretrained(model_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(case["tokenizer_dir"], name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(model_dir, name))


def routers(model):
    """(layer index, router module) of each sparse layer (Qwen3MoeTopKRouter = mlp.gate)."""
    found = []
    for name, module in model.named_modules():
        m = re.fullmatch(r"model\.layers\.(\d+)\.mlp\.gate", name)
        if m and hasattr(module, "top_k"):
            found.append((int(m.group(1)), module))
    return found


def sequence_routing(model, sequence):
    """routing [T, L, K], routing_gap [T, L], router_abs_scale of one full-sequence forward."""
    config = model.config
    T, L = len(sequence), config.num_hidden_layers
    E, K = config.num_experts, config.num_experts_per_tok
    routing = torch.full((T, L, K), -1, dtype=torch.long)
    gap = torch.ones(T, L)
    scale = torch.zeros(())
    hooks = []
    for layer, router in routers(model):
        def hook(module, args, output, layer=layer):
            nonlocal scale
            logits, _, indices = output
            x = args[0].reshape(T, -1).float()
            scale = torch.maximum(scale, (x.abs() @ module.weight.float().abs().t()).max())
            routing[:, layer] = indices.reshape(T, K)
            p = torch.softmax(logits.float(), dim=-1).reshape(T, E)
            top = torch.topk(p, min(K + 1, E), dim=-1).values
            gap[:, layer] = (top[:, K - 1] - top[:, K]) if K < E else 1.0
        hooks.append(router.register_forward_hook(hook))
    ids = torch.tensor([sequence], dtype=torch.long)
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    return routing.tolist(), gap.tolist(), float(scale)


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
    result = {"outputs": outputs, "logprobs": logprobs}
    if routers(model):
        result["routing"], result["routing_gap"], result["router_abs_scale"] = [], [], 0.0
        for prompt, new in zip(case["prompts"], outputs):
            routing, gap, scale = sequence_routing(model, prompt + new)
            result["routing"].append(routing)
            result["routing_gap"].append(gap)
            result["router_abs_scale"] = max(result["router_abs_scale"], scale)
    with open(os.path.join(case_dir, "outputs.json"), "w") as f:
        json.dump(result, f)


def main():
    plan_path, out_dir = sys.argv[1], sys.argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    for case in plan:
        run_case(case, out_dir)


if __name__ == "__main__":
    main()
