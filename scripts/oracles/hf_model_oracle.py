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
   "want": ["logits", "logprobs", "grads", "fp32_reference", "routing", "load_balancing"],
   "separate_documents": bool,  # run each document alone, outputs concatenated (optional)
   "lora": {"r", "alpha", "rslora", "targets"}}  # PEFT adapters (optional; see with_lora)
separate_documents is for models whose transformers code does not split a packed row at the
position resets (Qwen3.5's Gated DeltaNet layers carry their state across the row): each
document then runs as its own batch of one, which is what packing must equal.
For mode=create the model is written to OUT_DIR/<name>/model (HF format, `dtype`); a config whose
architecture is a multimodal *ForConditionalGeneration is created as that class (with its vision
tower), and is then run as transformers' AutoModelForCausalLM loads it: the text model alone.
Outputs go to OUT_DIR/<name>/outputs.safetensors:
  logits [T, V] fp32 (the model's logits upcast), logprobs [T] fp32 (log-prob of the next
  token, 0 at each document's last position), entropy [T] (of the next-token distribution,
  0 at each document's last position), grad.<param name> fp32 (masked next-token
  loss: mean over masked target positions), loss (scalar), and with "fp32_reference" the
  logprobs of the same model computed in fp32 (logprobs_fp32).
Mixture-of-experts models (Qwen3MoeForCausalLM, Qwen3_5MoeForCausalLM): "perturb" also redraws the router weights
(mlp.gate.weight, std 0.3) so that different tokens pick clearly different experts. Gradients of
the fused in-memory expert tensors (experts.gate_up_proj [E, 2F, D], experts.down_proj [E, D, F])
are written under the on-disk per-expert names (experts.<e>.{gate,up,down}_proj.weight).
  routing [T, L, K] int64: the top-k expert ids each sparse layer's router chose per token (in
    the router's order, descending probability), -1 in the rows of dense layers;
  router_probs [T, L, E] fp32: each sparse layer's softmax router probabilities (0 for dense);
  routing_gap [T, L] fp32: p_(K) - p_(K+1), the margin of the k-th choice (1 for dense layers);
  router_abs_scale (scalar): max over sparse layers and tokens of sum_d |x_d W_ed| (the router
    logits' absolute scale, for rounding bounds);
  with "grads_fp64" also grad64.<param name>: the same gradients with the model run in float64
    (the exact value, against which each fp32 implementation's own error is measured);
  with "fp32_reference" also router_probs_fp32 / routing_fp32 / routing_gap_fp32 of the fp32 model;
  with "load_balancing": load_balancing_loss (scalar), transformers' load_balancing_loss_func
    over the packed row (no attention mask, num_experts, num_experts_per_tok), and
    lb_grad.<router weight name> fp32, its gradient with respect to each router's weights.
"""
import json
import os
import re
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def create_model(case, out_dir):
    torch.manual_seed(case["seed"])
    fields = {k: v for k, v in case["config"].items() if k not in ("architectures", "model_type")}
    config = AutoConfig.for_model(case["config"]["model_type"], **fields)
    config.architectures = case["config"]["architectures"]
    arch = config.architectures[0]
    if arch.endswith("ForConditionalGeneration"):  # a multimodal model: text + vision tower
        import transformers
        model = getattr(transformers, arch)._from_config(config,
                                                         attn_implementation=case["attn"])
    else:
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
                elif name.endswith("mlp.gate.weight"):  # MoE router [E, D]
                    p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    model_dir = os.path.join(out_dir, case["name"], "model")
    model.to(DTYPES[case["dtype"]]).save_pretrained(model_dir)
    return model_dir


def load_model(model_dir, dtype, attn):
    # float64: the per-expert loop (torch's grouped_mm takes no float64).
    extra = {"experts_implementation": "eager"} if dtype == "float64" else {}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype],
                                                 attn_implementation=attn, **extra)
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


def model_logits(model, tokens, positions, documents=None):
    """[T, V] logits of the packed row, or (documents given) of each document run alone."""
    if documents is not None:
        return torch.cat([model(input_ids=torch.tensor(doc)[None], use_cache=False).logits[0]
                          for doc in documents])
    # use_cache=False: transformers only derives the packed-document mask without a cache.
    return model(input_ids=tokens[None], position_ids=positions[None], use_cache=False).logits[0]


def token_logprobs(model, tokens, positions, targets, valid, with_entropy=False, documents=None):
    logits = model_logits(model, tokens, positions, documents)
    logp = torch.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), dim=-1)
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


def routers(model):
    """(layer index, router module) of each sparse layer (Qwen3MoeTopKRouter = mlp.gate)."""
    found = []
    for name, module in model.named_modules():
        m = re.fullmatch(r"model\.layers\.(\d+)\.mlp\.gate", name)
        if m and hasattr(module, "top_k"):
            found.append((int(m.group(1)), module))
    return found


def segments(tokens, positions, documents=None):
    """(first row, model inputs) of the packed row, or (documents given) of each document."""
    if documents is None:
        return [(0, dict(input_ids=tokens[None], position_ids=positions[None]))]
    starts = [sum(len(d) for d in documents[:i]) for i in range(len(documents))]
    return [(start, dict(input_ids=torch.tensor(doc)[None]))
            for start, doc in zip(starts, documents)]


def record_routing(model, tokens, positions, documents=None):
    """routing [T, L, K], router_probs [T, L, E], routing_gap [T, L] via forward hooks."""
    config = model.config
    T, L = tokens.numel(), config.num_hidden_layers
    E, K = config.num_experts, config.num_experts_per_tok
    routing = torch.full((T, L, K), -1, dtype=torch.long)
    probs = torch.zeros(T, L, E)
    gap = torch.ones(T, L)
    scale = torch.zeros(())
    rows = slice(0, T)  # the rows of the forward that runs now
    hooks = []
    for layer, router in routers(model):
        def hook(module, args, output, layer=layer):
            nonlocal scale
            logits, _, indices = output
            n = rows.stop - rows.start
            x = args[0].reshape(n, -1).float()
            scale = torch.maximum(scale, (x.abs() @ module.weight.float().abs().t()).max())
            p = torch.softmax(logits.float(), dim=-1)
            routing[rows, layer] = indices.reshape(n, K)
            probs[rows, layer] = p.reshape(n, E)
            top = torch.topk(p, min(K + 1, E), dim=-1).values
            gap[rows, layer] = (top[:, K - 1] - top[:, K]) if K < E else 1.0
        hooks.append(router.register_forward_hook(hook))
    with torch.no_grad():
        for start, inputs in segments(tokens, positions, documents):
            rows = slice(start, start + inputs["input_ids"].shape[1])
            model(**inputs, use_cache=False)
    for h in hooks:
        h.remove()
    return routing, probs, gap, scale


def per_expert_grads(name, grad):
    """Gradients of the fused in-memory expert tensors under the on-disk per-expert names."""
    if name.endswith("mlp.experts.gate_up_proj"):  # [E, 2F, D]: gate rows first, then up
        prefix = name[: -len("gate_up_proj")]
        F = grad.shape[1] // 2
        out = {}
        for e in range(grad.shape[0]):
            out[f"grad.{prefix}{e}.gate_proj.weight"] = grad[e, :F].float().contiguous()
            out[f"grad.{prefix}{e}.up_proj.weight"] = grad[e, F:].float().contiguous()
        return out
    if name.endswith("mlp.experts.down_proj"):  # [E, D, F]
        prefix = name[: -len("down_proj")]
        return {f"grad.{prefix}{e}.down_proj.weight": grad[e].float().contiguous()
                for e in range(grad.shape[0])}
    return {"grad." + name: grad.float().contiguous()}


def load_balancing(model, tokens, positions, documents=None):
    """transformers' load-balancing loss over the packed row (or its documents, each run
    alone, router logits concatenated) and its router-weight gradients."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func
    model.zero_grad()
    per_layer = None
    for _, inputs in segments(tokens, positions, documents):
        out = model(**inputs, use_cache=False, output_router_logits=True)
        logits = [l.reshape(-1, l.shape[-1]) for l in out.router_logits]
        per_layer = logits if per_layer is None else [torch.cat(p) for p in zip(per_layer, logits)]
    config = model.config
    loss = load_balancing_loss_func(tuple(per_layer), config.num_experts,
                                    config.num_experts_per_tok, None)
    loss.backward()
    result = {"load_balancing_loss": loss.detach().float().reshape(())}
    for layer, router in routers(model):
        result[f"lb_grad.model.layers.{layer}.mlp.gate.weight"] = router.weight.grad.float().clone()
    model.zero_grad()
    return result


def with_lora(model, case, out_dir):
    """The model wrapped by PEFT with case["lora"] = {r, alpha, rslora, targets}; lora_B drawn
    N(0, 0.1) (PEFT starts it at zero) so that the adapters change the outputs. The adapter is
    saved to OUT_DIR/<name>/adapter; only adapter parameters train (PEFT freezes the base)."""
    from peft import LoraConfig, get_peft_model
    spec = case["lora"]
    config = LoraConfig(r=spec["r"], lora_alpha=spec["alpha"], use_rslora=spec["rslora"],
                        target_modules=spec["targets"], lora_dropout=0.0, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(case["seed"] + 2)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    peft_model.save_pretrained(os.path.join(out_dir, case["name"], "adapter"))
    return peft_model


def furlong_name(name):
    """furlong's name of a (PEFT-wrapped) model's parameter."""
    name = name.removeprefix("base_model.model.")
    return name.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")


def masked_loss_grads(model, case, tokens, positions, alone):
    """loss (mean over masked target positions) and grad.<name> of every parameter."""
    docs = case["documents"]
    model.train()
    mask_targets, mask_valid = next_token_targets(docs, case.get("loss_mask"))
    _, lp_g = token_logprobs(model, tokens, positions, mask_targets, mask_valid, documents=alone)
    loss = -(lp_g.sum() / mask_valid.sum())
    loss.backward()
    out = {"loss": loss.detach().float().reshape(())}
    for name, p in model.named_parameters():
        if p.grad is not None:
            out.update(per_expert_grads(furlong_name(name), p.grad))
    return out


def run_case(case, out_dir):
    if case["mode"] == "create":
        model_dir = create_model(case, out_dir)
    else:
        model_dir = case["model_dir"]
    model = load_model(model_dir, case["dtype"], case["attn"])
    if case.get("lora"):
        model = with_lora(model, case, out_dir)
    docs = case["documents"]
    tokens, positions = packed_inputs(docs)
    alone = docs if case.get("separate_documents") else None
    all_valid = [[1] * len(d) for d in docs]
    targets, valid = next_token_targets(docs, all_valid)
    want = set(case["want"])
    out = {}
    with torch.no_grad():
        logits, lp, entropy = token_logprobs(model, tokens, positions, targets, valid, True,
                                             alone)
    if "logits" in want:
        out["logits"] = logits.float().contiguous()
    out["logprobs"] = lp.contiguous()
    out["entropy"] = entropy.contiguous()
    if "fp32_reference" in want:
        ref = load_model(model_dir, "float32", case["attn"])
        with torch.no_grad():
            _, lp32 = token_logprobs(ref, tokens, positions, targets, valid, documents=alone)
        out["logprobs_fp32"] = lp32.contiguous()
    is_moe = bool(routers(model))
    if "routing" in want and is_moe:
        (out["routing"], out["router_probs"], out["routing_gap"],
         out["router_abs_scale"]) = record_routing(model, tokens, positions, alone)
        if "fp32_reference" in want:
            (out["routing_fp32"], out["router_probs_fp32"], out["routing_gap_fp32"],
             _) = record_routing(ref, tokens, positions, alone)
    if "load_balancing" in want and is_moe:
        model.train()
        out.update(load_balancing(model, tokens, positions, alone))
    if "grads" in want:
        out.update(masked_loss_grads(model, case, tokens, positions, alone))
    if "grads_fp64" in want:
        exact = load_model(model_dir, "float64", case["attn"])
        grads = masked_loss_grads(exact, case, tokens, positions, alone)
        out.update({"grad64." + k[len("grad."):]: v for k, v in grads.items() if k != "loss"})
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
