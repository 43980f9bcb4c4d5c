#!/usr/bin/env python3
"""Python peer of bench/fsdp_bench.cpp: the same FSDP training steps with PyTorch FSDP2
(`fully_shard` per decoder layer + root, Gloo, CPU mesh) and HF transformers, run under torchrun;
rank 0 prints one JSON object with the same fields.

Matches furlong's defaults: fp32 master weights (the model is loaded in fp32), compute in --dtype
(MixedPrecisionPolicy param_dtype; bf16 by default), gradients reduced in fp32
(reduce_dtype=float32), reshard after forward, SFT loss (per-document mean NLL over the response
tokens, micro-batch sum scaled by W/GBS), global-norm clipping at 1.0, torch.optim.AdamW
(fused=True, betas (0.9, 0.95), eps 1e-8). Each micro-batch is one packed sequence: input_ids
[1, T], position_ids restarting per document, use_cache=False (transformers then masks
block-diagonally), and logits_to_keep=<response rows> so only the rows the loss needs reach the
vocabulary projection (what furlong does too).

Collective payload bytes are counted by wrapping torch.distributed's all_gather_single,
reduce_scatter_single and all_reduce (what FSDP2 calls in torch 2.13), with the same convention
as furlong's dist::CommStats: a gather counts its output, a reduce-scatter its input, an
all-reduce its tensor.

  python -m torch.distributed.run --standalone --nproc-per-node 2 bench/fsdp2_bench.py \\
      --hf-checkpoint DIR [--dtype bfloat16] [--docs 8] [--doc-len 128] [--threads 1]
"""
import argparse
import json
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import AutoModelForCausalLM

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

COMM = {"all_gather": 0, "reduce_scatter": 0, "all_reduce": 0, "calls": 0}


def count_collectives():
    """Wraps the torch.distributed entry points FSDP2 uses so each call adds its payload bytes."""
    def nbytes(t):
        return t.numel() * t.element_size()

    def wrap(name, key, pick):
        inner = getattr(dist, name)

        def counted(*args, **kwargs):
            COMM[key] += nbytes(pick(args, kwargs))
            COMM["calls"] += 1
            return inner(*args, **kwargs)
        setattr(dist, name, counted)

    wrap("all_gather_single", "all_gather", lambda a, k: a[0] if a else k["output_tensor"])
    wrap("reduce_scatter_single", "reduce_scatter", lambda a, k: a[1] if len(a) > 1 else k["input"])
    wrap("all_reduce", "all_reduce", lambda a, k: a[0] if a else k["tensor"])


def make_docs(docs, length, vocab):
    return [[(d * 131 + i * 31 + 7) % vocab for i in range(length)] for d in range(docs)]


def micro_batch_loss(model, docs, prompt_len):
    """Sum over `docs` of the mean response-token NLL, on one packed sequence."""
    ids = torch.tensor([[t for d in docs for t in d]])
    pos = torch.cat([torch.arange(len(d)) for d in docs])[None]
    rows, targets, owner = [], [], []
    offset = 0
    for i, d in enumerate(docs):
        for j in range(prompt_len, len(d)):
            rows.append(offset + j - 1)
            targets.append(d[j])
            owner.append(i)
        offset += len(d)
    logits = model(input_ids=ids, position_ids=pos, use_cache=False,
                   logits_to_keep=torch.tensor(rows)).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    nll = -logp.gather(1, torch.tensor(targets)[:, None]).squeeze(1)
    per_doc = torch.zeros(len(docs)).index_add(0, torch.tensor(owner), nll)
    counts = torch.tensor([len(d) - prompt_len for d in docs], dtype=torch.float32)
    return (per_doc / counts).sum()


def peak_rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hf-checkpoint", required=True)
    p.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    p.add_argument("--docs", type=int, default=8, help="documents per step (global batch)")
    p.add_argument("--doc-len", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--micro-batch-size", type=int, default=0, help="0: one micro-batch per rank")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    count_collectives()
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    model = AutoModelForCausalLM.from_pretrained(a.hf_checkpoint, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    model.train()
    mp = MixedPrecisionPolicy(param_dtype=DTYPES[a.dtype], reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                            fused=True)
    docs = make_docs(a.docs, a.doc_len, model.config.vocab_size)
    local = docs[rank::world]
    mbs = a.micro_batch_size or len(local)

    times, step_comm = [], {}
    for i in range(a.warmup + a.iters):
        for k in COMM:
            COMM[k] = 0
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for m in range(0, len(local), mbs):
            loss = micro_batch_loss(model, local[m:m + mbs], a.prompt_len)
            loss_sum += loss.item()
            (loss * (world / a.docs)).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        total = torch.tensor([loss_sum], dtype=torch.float64)
        dist.all_reduce(total)
        times.append(time.perf_counter() - start)
        step_comm = dict(COMM)
    timed = sorted(times[a.warmup:])
    median = timed[len(timed) // 2]
    rss = [None] * world
    dist.all_gather_object(rss, peak_rss_bytes())
    n_params = sum(p.numel() for p in params)
    micro_batches = len(range(0, len(local), mbs))
    theory = micro_batches * n_params * (2 * DTYPES[a.dtype].itemsize + 4)
    if rank == 0:
        tokens = a.docs * a.doc_len
        print(json.dumps({
            "impl": "fsdp2", "dtype": a.dtype, "ranks": world, "threads": torch.get_num_threads(),
            "tokens": tokens, "micro_batches_per_rank": micro_batches, "seconds": timed,
            "median_s": median, "tokens_per_s": tokens / median,
            "peak_rss_bytes": max(rss), "peak_rss_per_rank": rss, "params": n_params,
            "comm_bytes_per_step": dict(step_comm, fsdp_total=step_comm["all_gather"] +
                                        step_comm["reduce_scatter"] + step_comm["all_reduce"]),
            "theory_bytes_per_step": theory}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
