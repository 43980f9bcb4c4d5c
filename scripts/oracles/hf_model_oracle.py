#!/usr/bin/env python3
"""Reference outputs from HF transformers for furlong's model parity tests.

Usage: hf_model_oracle.py PLAN.json OUT_DIR

PLAN.json is a list of cases written by the C++ test:
  {"name": str, "mode": "create" | "load",
   "config": {...HF config fields incl. "architectures"...},   # mode=create
   "model_dir": str,                                           # mode=load (e.g. furlong init-model)
   "seed": int, "dtype": "float32" | "bfloat16", "attn": "sdpa" | "eager",
   "perturb": bool,            # create: randomize norm weights / biases so they matter
   "documents": [[ids...], ...],       # packed into one row, positions restart at 0
   "loss_mask": [[0/1...], ...],       # per document, same lengths (optional)
   "want": ["logits", "logprobs", "grads", "fp32_reference"]}
For mode=create the model is written to OUT_DIR/<name>/model (HF format, `dtype`).
Outputs go to OUT_DIR/<name>/outputs.safetensors:
  logits [T, V] fp32 (the model's logits upcast), logprobs [T] fp32 (log-prob of the next
  token, 0 at each document's last position), entropy [T] (of the next-token distribution,
  0 at each document's last position), grad.<param name> fp32 (masked next-token
  loss: mean over masked target positions), loss (scalar), and with "fp32_reference" the
  logprobs of the same model computed in fp32 (logprobs_fp32).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def create_model(case, out_dir):
    torch.manual_seed(case["seed"])
    fields = {k: v for k, v in case["config"].items() if k not in ("architectures", "model_type")}
    config = AutoConfig.for_model(case["config"]["model_type"], **fields)
    config.architectures = case["config"]["architectures"]
    model = AutoModelForCausalLM.from_config(config, attn_implementation=case["attn"])
    model = model.to(torch.float32)
    if case.get("perturb", True):
        gen = torch.Generator().manual_seed(case["seed"] + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
                elif name.endswith(".bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    model_dir = os.path.join(out_dir, case["name"], "model")
    model.to(DTYPES[case["dtype"]]).save_pretrained(model_dir)
    return model_dir


def load_model(model_dir, dtype, attn):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype],
                                                 attn_implementation=attn)
    model.eval()
    return model


def packed_inputs(documents):
    tokens = torch.tensor([t for doc in documents for t in doc], dtype=torch.long)
    positions = torch.tensor([i for doc in documents for i in range(len(doc))], dtype=torch.long)
    return tokens, positions


def next_token_targets(documents, loss_mask):
    """targets[t] = token t+1 of the same document; valid[t] = has a target and is masked in."""
    targets, valid = [], []
    for d, doc in enumerate(documents):
        mask = loss_mask[d] if loss_mask else [1] * len(doc)
        for i in range(len(doc)):
            last = i + 1 == len(doc)
            targets.append(0 if last else doc[i + 1])
            valid.append(0 if last else int(mask[i + 1]))
    return torch.tensor(targets), torch.tensor(valid, dtype=torch.bool)


def token_logprobs(model, tokens, positions, targets, valid, with_entropy=False):
    # use_cache=False: transformers only derives the packed-document mask without a cache.
    logits = model(input_ids=tokens[None], position_ids=positions[None], use_cache=False).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    lp = logp.gather(1, targets[:, None]).squeeze(1)
    lp = torch.where(valid, lp, torch.zeros_like(lp))
    if with_entropy:
        # Entropy in float64 from the model's logits: the exact value for these logits, so a
        # test can bound furlong's error directly (fp32 -sum(p log p) itself errs by up to
        # ~1e-4 over a 150k vocabulary).
        logp64 = torch.log_softmax(logits.double(), dim=-1)
        entropy = (-(logp64.exp() * logp64).sum(-1)).float()
        return logits, lp, torch.where(valid, entropy, torch.zeros_like(entropy))
    return logits, lp


def run_case(case, out_dir):
    if case["mode"] == "create":
        model_dir = create_model(case, out_dir)
    else:
        model_dir = case["model_dir"]
    model = load_model(model_dir, case["dtype"], case["attn"])
    docs = case["documents"]
    tokens, positions = packed_inputs(docs)
    all_valid = [[1] * len(d) for d in docs]
    targets, valid = next_token_targets(docs, all_valid)
    want = set(case["want"])
    out = {}
    with torch.no_grad():
        logits, lp, entropy = token_logprobs(model, tokens, positions, targets, valid, True)
    if "logits" in want:
        out["logits"] = logits.float().contiguous()
    out["logprobs"] = lp.contiguous()
    out["entropy"] = entropy.contiguous()
    if "fp32_reference" in want:
        ref = load_model(model_dir, "float32", case["attn"])
        with torch.no_grad():
            _, lp32 = token_logprobs(ref, tokens, positions, targets, valid)
        out["logprobs_fp32"] = lp32.contiguous()
    if "grads" in want:
        model.train()
        mask_targets, mask_valid = next_token_targets(docs, case.get("loss_mask"))
        _, lp_g = token_logprobs(model, tokens, positions, mask_targets, mask_valid)
        loss = -(lp_g.sum() / mask_valid.sum())
        loss.backward()
        out["loss"] = loss.detach().float().reshape(())
        for name, p in model.named_parameters():
            if p.grad is not None:
                out["grad." + name] = p.grad.float().contiguous()
    os.makedirs(os.path.join(out_dir, case["name"]), exist_ok=True)
    save_file(out, os.path.join(out_dir, case["name"], "outputs.safetensors"))


def main():
    plan_path, out_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    with open(plan_path) as f:
        plan = json.load(f)
    for case in plan:
        run_case(case, out_dir)
    print(f"oracle: {len(plan)} cases written to {out_dir}")


if __name__ == "__main__":
    main()
