#!/usr/bin/env python3
"""Reference trainer for furlong's FSDP backend: PyTorch's own FSDP2 (`fully_shard`) over Gloo on
CPU, training a HF transformers model the way `furlong train --loss-type sft` trains it (miles'
FSDP backend, spec sections 6.1-6.7), so tests/train/fsdp2_parity_test.cpp can compare per-step
losses, gradient norms and the trained parameters.

Run under torchrun (one process per rank):

  python -m torch.distributed.run --standalone --nproc-per-node W \\
      scripts/oracles/fsdp2_reference.py --model DIR --data FILE --out DIR \\
      [--dp-replicate-size R] [--global-batch-size 8] [--rollouts K] [--micro-batch-size M] \\
      [--lr 1e-3] [--weight-decay 0.01] [--adam-eps 1e-8] [--clip-grad 1.0]

or as a plain script with `--launch W`, which re-executes itself under torchrun with W ranks
(what the C++ tests do through their cached_oracle helper).

What it does (furlong's flags and defaults in brackets):
- mesh: init_device_mesh("cpu", (R, W/R), ("dp_replicate", "dp_shard")), i.e. HSDP when R > 1;
  1-D ("dp_shard",) when R == 1 [--dp-replicate-size].
- model: AutoModelForCausalLM.from_pretrained(DIR, dtype=float32, attn_implementation="sdpa");
  fully_shard on every decoder layer, then on the root (embedding, final norm, lm_head), with
  MixedPrecisionPolicy(param_dtype=float32, reduce_dtype=float32) [--compute-dtype float32;
  furlong reduces gradients in fp32 always].
- data: rows {"prompt_ids", "response_ids"}; optimizer step k takes rows [k*GBS, (k+1)*GBS)
  [--global-batch-size, no --rollout-shuffle]; rank r of W takes rows r, r+W, ... of the step;
  its rows are cut into micro-batches of M consecutive rows [--micro-batch-size]. A micro-batch
  is packed: input_ids [1, T], position_ids restarting at 0 per row, no attention mask and
  use_cache=False, so transformers masks block-diagonally (the rows do not see each other).
- loss with --calculate-per-token-loss (miles' FSDP backend): a micro-batch's loss is the sum
  of -log p over all its response tokens, backpropagated unscaled, so after FSDP2's average the
  step's gradient is that of (1/W) * the token sum of the step; the logged loss is the token sum
  over the token count.
- loss [--loss-type sft, no --calculate-per-token-loss]: per row, the mean over its response
  tokens of -log p(token) (fp32 log_softmax of the logits at the preceding positions); a
  micro-batch's loss is the sum over its rows, scaled by W/GBS before backward. FSDP2 averages
  gradients over the W ranks, so the step's gradient is that of (1/GBS) * sum over the step's
  rows of their per-row loss. The logged loss is the mean per-row loss over the step's GBS rows.
- clip_grad_norm_(params, --clip-grad) (skipped when 0); its pre-clip global norm is logged as
  grad_norm. torch.optim.AdamW(lr, betas (0.9, 0.95), eps, weight_decay, fused=True) with a
  constant LR [--lr, --weight-decay, --adam-eps (1e-8), --lr-decay-style constant; furlong's AdamW is bit-identical
  to fused=True on CPU, src/optim/adamw.h].

Outputs (rank 0 writes; every rank takes part in the collectives):
  OUT/losses.json            [{"loss": ..., "grad_norm": ...}] per optimizer step
  OUT/reference.safetensors  the full parameters after the last step (DTensor.full_tensor()),
                             under their HF names (for Qwen3-MoE, the on-disk per-expert names:
                             transformers' fused in-memory experts.gate_up_proj [E, 2F, D] and
                             experts.down_proj [E, D, F], which fully_shard shards along E like
                             any parameter, are split into experts.<e>.{gate,up,down}_proj.weight)

Gradient reduction (torch 2.13.0+cpu): FSDP2 reduce-scatters with op=AVG over dp_shard and, for
HSDP, all-reduces with op=AVG over dp_replicate. On Gloo both averages are correct in this
version (older releases summed instead, pytorch issue #162338): 1-, 2- and 4-rank runs of this
script at r1s1, r1s2, r1s4 and r2s2 give the same grad norms and parameters within 6e-8.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="HF model directory")
    p.add_argument("--data", required=True, help="JSONL of prompt_ids / response_ids")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--dp-replicate-size", type=int, default=1)
    p.add_argument("--global-batch-size", type=int, default=8)
    p.add_argument("--rollouts", type=int, default=1, help="optimizer steps")
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--clip-grad", type=float, default=1.0, help="max global grad norm (0 = off)")
    p.add_argument("--calculate-per-token-loss", action="store_true",
                   help="miles' FSDP per-token loss: each micro-batch backpropagates its token "
                        "sum unscaled; the logged loss is the step's token mean")
    p.add_argument("--launch", type=int, default=0,
                   help="re-run this script under torchrun with this many ranks")
    return p.parse_args(argv)


def relaunch(argv, nproc, attempts=3):
    """Runs this script under torchrun with `nproc` ranks and exits with its status.

    A Gloo rank can abort on its own on a heavily loaded machine ("terminate called without an
    active exception" while the ranks connect); that is the reference's infrastructure failing,
    not a result, so a failed launch is retried (a deterministic error fails every attempt)."""
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--launch":
            skip = True
        elif not a.startswith("--launch="):
            rest.append(a)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", os.path.abspath(__file__)] + rest
    for attempt in range(1, attempts + 1):
        code = subprocess.run(cmd).returncode
        if code == 0:
            sys.exit(0)
        print(f"fsdp2_reference: torchrun attempt {attempt}/{attempts} failed (exit {code})",
              file=sys.stderr, flush=True)
    sys.exit(1)


def load_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows.append((list(r["prompt_ids"]), list(r["response_ids"])))
    return rows


def micro_batch_loss(model, rows, torch, per_token=False):
    """Sum over `rows` of each row's mean response-token NLL, on one packed sequence; with
    per_token, the sum of the NLL over all response tokens instead."""
    ids, pos, pred_rows, targets, owner, lengths = [], [], [], [], [], []
    offset = 0
    for i, (prompt, response) in enumerate(rows):
        tokens = prompt + response
        ids += tokens
        pos += list(range(len(tokens)))
        for j in range(len(response)):
            pred_rows.append(offset + len(prompt) + j - 1)
            targets.append(response[j])
            owner.append(i)
        lengths.append(len(response))
        offset += len(tokens)
    input_ids = torch.tensor([ids], dtype=torch.long)
    position_ids = torch.tensor([pos], dtype=torch.long)
    logits = model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits[0]
    logp = torch.log_softmax(logits[torch.tensor(pred_rows)].float(), dim=-1)
    nll = -logp.gather(1, torch.tensor(targets)[:, None]).squeeze(1)
    if per_token:
        return nll.sum()
    per_row = torch.zeros(len(rows)).index_add(0, torch.tensor(owner), nll)
    return (per_row / torch.tensor(lengths, dtype=torch.float32)).sum()


def per_expert_names(full):
    """Qwen3-MoE: transformers' fused expert tensors under the on-disk per-expert names."""
    out = {}
    for name, t in full.items():
        if name.endswith("mlp.experts.gate_up_proj"):  # [E, 2F, D]: gate rows, then up rows
            prefix, F = name[: -len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = t[e, :F].contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = t[e, F:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):  # [E, D, F]
            prefix = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t
    return out


def build_model(args, world, torch):
    """The HF model, fully_shard'ed per decoder layer and at the root over the (HSDP) mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM

    R = args.dp_replicate_size
    assert world % R == 0, f"world size {world} is not a multiple of --dp-replicate-size {R}"
    if R > 1:
        mesh = init_device_mesh("cpu", (R, world // R), mesh_dim_names=("dp_replicate", "dp_shard"))
    else:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    model.train()
    mp = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def main(argv):
    args = parse_args(argv)
    if args.launch and "RANK" not in os.environ:
        relaunch(argv, args.launch)

    import torch
    import torch.distributed as dist
    from safetensors.torch import save_file

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(args, world, torch)
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), eps=args.adam_eps,
                            weight_decay=args.weight_decay, fused=True)

    data = load_rows(args.data)
    gbs, mbs = args.global_batch_size, args.micro_batch_size
    assert gbs % world == 0 and (gbs // world) % mbs == 0, "batch sizes do not divide"
    assert len(data) >= args.rollouts * gbs, "not enough rows for --rollouts"
    history = []
    for step in range(args.rollouts):
        opt.zero_grad(set_to_none=True)
        local = data[step * gbs:(step + 1) * gbs][rank::world]
        loss_sum = 0.0
        per_token = args.calculate_per_token_loss
        for m in range(0, len(local), mbs):
            loss = micro_batch_loss(model, local[m:m + mbs], torch, per_token)
            loss_sum += loss.item()
            (loss if per_token else loss * (world / gbs)).backward()
        if args.clip_grad > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, args.clip_grad)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        opt.step()
        tokens = sum(len(response) for _, response in local)
        total = torch.tensor([loss_sum, tokens], dtype=torch.float64)
        dist.all_reduce(total)  # over all ranks: every row of the step once
        count = total[1].item() if per_token else gbs
        history.append({"loss": total[0].item() / count, "grad_norm": grad_norm.item()})

    full = per_expert_names(
        {n: p.detach().full_tensor().contiguous() for n, p in zip(names, params)})
    if rank == 0:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        save_file(full, str(out / "reference.safetensors"))
        (out / "losses.json").write_text(json.dumps(history) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
