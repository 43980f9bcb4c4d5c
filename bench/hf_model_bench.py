#!/usr/bin/env python3
"""Python peer of bench/model_bench.cpp: the same training step / scoring pass with HF
transformers (PyTorch eager), same packed batch, printed as one JSON object."""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def make_batch(docs, length, vocab):
    tokens = torch.tensor([(d * 131 + i * 31 + 7) % vocab for d in range(docs)
                           for i in range(length)], dtype=torch.long)
    positions = torch.arange(length).repeat(docs)
    rows = torch.tensor([d * length + i for d in range(docs) for i in range(length - 1)])
    return tokens, positions, rows, tokens[rows + 1]


def forward_logits(model, tokens, positions):
    """[T, V] logits of the packed documents. Models with recurrent (Gated DeltaNet) layers
    take the documents as a batch (they are all doc_len long): transformers would carry the
    state across a packed row's document boundaries."""
    if "linear_attention" in (getattr(model.config, "layer_types", None) or []):
        docs = int((positions == 0).sum())
        out = model(input_ids=tokens.view(docs, -1), use_cache=False).logits
        return out.reshape(-1, out.shape[-1])
    return model(input_ids=tokens[None], position_ids=positions[None], use_cache=False).logits[0]


def train_step(model, tokens, positions, rows, targets):
    start = time.perf_counter()
    model.zero_grad(set_to_none=True)
    logits = forward_logits(model, tokens, positions)
    logp = torch.log_softmax(logits[rows].float(), dim=-1)
    loss = -logp.gather(1, targets[:, None]).mean()
    loss.backward()
    return time.perf_counter() - start


def score_step(model, tokens, positions, rows, targets):
    with torch.inference_mode():
        start = time.perf_counter()
        logits = forward_logits(model, tokens, positions)
        logp = torch.log_softmax(logits[rows].float(), dim=-1)
        lp = logp.gather(1, targets[:, None]).squeeze(1)
        entropy = -(logp.exp() * logp).sum(-1)
        float(entropy.sum()) + float(lp.sum())
        return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hf-checkpoint", required=True)
    p.add_argument("--mode", choices=["train", "score"], default="train")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--docs", type=int, default=8)
    p.add_argument("--doc-len", type=int, default=128)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(a.hf_checkpoint, dtype=DTYPES[a.dtype],
                                                 attn_implementation="sdpa")
    model.train(a.mode == "train")
    tokens, positions, rows, targets = make_batch(a.docs, a.doc_len, model.config.vocab_size)
    step = train_step if a.mode == "train" else score_step
    times = []
    for i in range(a.warmup + a.iters):
        t = step(model, tokens, positions, rows, targets)
        if i >= a.warmup:
            times.append(t)
    times.sort()
    median = times[len(times) // 2]
    print(json.dumps({"impl": "transformers", "mode": a.mode, "dtype": a.dtype,
                      "tokens": a.docs * a.doc_len, "threads": torch.get_num_threads(),
                      "seconds": times, "median_s": median,
                      "tokens_per_s": a.docs * a.doc_len / median}))


if __name__ == "__main__":
    main()
