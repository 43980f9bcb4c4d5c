#!/usr/bin/env python3
"""Oracle for furlong's src/optim layer: torch.optim.AdamW, torch.nn.utils.clip_grad_norm_, and
an independent Python transcription of the LR schedule formulas of the miles FSDP backend spec
(section 6.9).

Usage: optim_reference.py PLAN_JSON OUT_DIR

PLAN_JSON (written by tests/optim) holds three lists:
  "adamw": {name, dtype, shapes, seed, lrs (one per step), beta1, beta2, eps, weight_decay,
            no_grad: [[step, param index], ...]}
      -> OUT_DIR/adamw_<name>.safetensors with the inputs ("init.<i>", "grad.<step>.<i>", the
         latter absent where the parameter has no grad that step) and, for each PyTorch
         implementation <impl> in forloop (foreach=False), foreach (foreach=True) and fused
         (fused=True), the final "<impl>.param.<i>" and, where state exists, "<impl>.exp_avg.<i>",
         "<impl>.exp_avg_sq.<i>", "<impl>.step.<i>".
  "clip":  {name, dtype, shapes, seed, scale, max_norm, special: "" | "inf" | "nan"}
      -> OUT_DIR/clip_<name>.safetensors: "grad.<i>" (input), "clipped.<i>" (after
         clip_grad_norm_), "norm" (its return value, as float64) and "norm_f64" (the exact
         L2 norm of the same values computed in float64).
  "lr":    {name, options: {flag-named fields, see lr_at}, train_iters, steps}
      -> OUT_DIR/lr.json: {name: [lr at scheduler step e for e in 0..steps-1]}.
"""
import json
import math
import os
import sys

import torch
from safetensors.torch import save_file

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
IMPLS = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def make_tensors(case):
    """Initial values and per-step grads, drawn from the case's seed (in fp32, then cast)."""
    gen = torch.Generator().manual_seed(case["seed"])
    dtype = DTYPES[case["dtype"]]
    shapes = [tuple(s) for s in case["shapes"]]
    init = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
    no_grad = {(s, i) for s, i in case.get("no_grad", [])}
    grads = []
    for step in range(len(case.get("lrs", [0]))):
        row = []
        for i, s in enumerate(shapes):
            # Grad magnitudes spread over several decades so eps and bias correction matter.
            g = torch.randn(s, generator=gen) * (10.0 ** (i % 4 - 2))
            row.append(None if (step, i) in no_grad else g.to(dtype))
        grads.append(row)
    return init, grads


def run_adamw(case, impl):
    init, grads = make_tensors(case)
    params = [t.clone().requires_grad_(True) for t in init]
    opt = torch.optim.AdamW(params, lr=case["lrs"][0], betas=(case["beta1"], case["beta2"]),
                            eps=case["eps"], weight_decay=case["weight_decay"], **IMPLS[impl])
    for step, lr in enumerate(case["lrs"]):
        for p, g in zip(params, grads[step]):
            p.grad = None if g is None else g.clone()
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    out = {}
    for i, p in enumerate(params):
        out[f"{impl}.param.{i}"] = p.detach().clone()
        state = opt.state.get(p)
        if state:
            out[f"{impl}.exp_avg.{i}"] = state["exp_avg"].clone()
            out[f"{impl}.exp_avg_sq.{i}"] = state["exp_avg_sq"].clone()
            out[f"{impl}.step.{i}"] = state["step"].clone().cpu()
    return out


def adamw_case(case, out_dir):
    init, grads = make_tensors(case)
    tensors = {f"init.{i}": t for i, t in enumerate(init)}
    for step, row in enumerate(grads):
        for i, g in enumerate(row):
            if g is not None:
                tensors[f"grad.{step}.{i}"] = g
    for impl in IMPLS:
        tensors.update(run_adamw(case, impl))
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, f"adamw_{case['name']}.safetensors"))


def clip_case(case, out_dir):
    gen = torch.Generator().manual_seed(case["seed"])
    dtype = DTYPES[case["dtype"]]
    grads = [(torch.randn(tuple(s), generator=gen) * case["scale"]).to(dtype)
             for s in case["shapes"]]
    if case.get("special"):
        grads[0].view(-1)[0] = float(case["special"])
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, case["max_norm"])
    exact = torch.cat([g.double().flatten() for g in grads]).norm() if grads else torch.zeros(())
    tensors = {"norm": norm.double().reshape(()), "norm_f64": exact.reshape(())}
    for i, (g, p) in enumerate(zip(grads, params)):
        tensors[f"grad.{i}"] = g
        tensors[f"clipped.{i}"] = p.grad
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, f"clip_{case['name']}.safetensors"))


# ---- LR schedule: the spec's formulas, written out independently of the C++ ----

def lr_at(o, train_iters, e):
    max_lr, min_lr, init = o["lr"], o["min_lr"], o["lr_warmup_init"]
    decay = o["lr_decay_iters"] if o.get("lr_decay_iters") is not None else train_iters
    if o.get("lr_warmup_fraction") is not None:
        warmup = o["lr_warmup_fraction"] * decay
    else:
        warmup = o["lr_warmup_iters"]
    style = o["lr_decay_style"]
    if warmup > 0 and e <= warmup:
        return init + (max_lr - init) * e / warmup
    if style == "constant":
        return max_lr
    if e > decay:
        return min_lr
    if style == "inverse-square-root":
        return max(min_lr, max_lr * math.sqrt(max(warmup, 1)) / math.sqrt(max(e, 1)))
    ratio = (e - warmup) / (decay - warmup)
    if style == "linear":
        coeff = 1.0 - ratio
    elif style == "cosine":
        coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    elif style == "WSD":
        wsd = o["lr_wsd_decay_iters"]
        start = decay - wsd
        if e <= start:
            coeff = 1.0
        else:
            r = (e - start) / wsd
            coeff = {
                "linear": lambda: 1.0 - r,
                "cosine": lambda: 0.5 * (1.0 + math.cos(math.pi * r)),
                "exponential": lambda: 2.0 * math.pow(0.5, r) - 1.0,
                "minus_sqrt": lambda: 1.0 - math.sqrt(r),
            }[o["lr_wsd_decay_style"]]()
    else:
        raise ValueError(f"{style} decay style is not supported.")
    return min_lr + coeff * (max_lr - min_lr)


def main():
    plan_path, out_dir = sys.argv[1], sys.argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    for case in plan.get("adamw", []):
        adamw_case(case, out_dir)
    for case in plan.get("clip", []):
        clip_case(case, out_dir)
    lrs = {c["name"]: [lr_at(c["options"], c["train_iters"], e) for e in range(c["steps"])]
           for c in plan.get("lr", [])}
    with open(os.path.join(out_dir, "lr.json"), "w") as f:
        json.dump(lrs, f, indent=1)


if __name__ == "__main__":
    main()
