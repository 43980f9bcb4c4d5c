#!/usr/bin/env python3
"""Oracle for furlong's src/rl layer: an independent torch implementation of the RL algorithm
formulas of the miles RL-loop spec (/work/shared/reference/miles-rl-loop-spec.md, sections
6.1 reward normalization, 6.3 KL estimators, 6.4 advantage estimators, 6.5 policy loss, 6.6
reductions), written sample by sample from the spec's text.

Usage: rl_reference.py PLAN_JSON OUT_JSON

PLAN_JSON = {"cases": [case, ...]}; every case has "name" and "kind":
  reward_norm: rewards, group_index, rollout_id ([] = one rollout per sample), options
               {estimator, rewards_normalization, grpo_std_normalization, n_samples_per_prompt}
               -> {"rewards": [...]}                                     (float64)
  kl:          type, logp, logp_base -> {"kl": [...]}
  advantages:  lengths, mask, rewards (per sample), log_probs, ref_log_probs, options
               {estimator, kl_coef, kl_type, gamma, normalize_advantages}
               -> {"advantages": [...]}
  loss:        lengths, mask, log_probs, old_log_probs, advantages, ref_log_probs,
               rollout_log_probs, entropy (each [] when absent), normalizer, options
               {eps_clip, eps_clip_high, eps_clip_c (null = off), sequence_level_ratio, use_tis,
                tis_clip, tis_clip_low, entropy_coef, use_kl_loss, kl_loss_coef, kl_loss_type,
                use_unbiased_kl, calculate_per_token_loss, use_opsm, opsm_delta}
               -> {"loss": x, "metrics": {name: sum}, "grad_log_probs": [...],
                   "grad_entropy": [...] (when entropy is given)}
Token tensors are float32 (the spec's training dtype for these quantities); per-sample reward
normalization is float64 (rewards are Python floats in miles).
"""
import json
import math
import sys

import torch

F32 = torch.float32


def t32(values):
    return torch.tensor(values, dtype=F32)


# ---------------------------------------------------------------- 6.1 reward normalization
def reward_norm(case):
    o = case["options"]
    raw = case["rewards"]
    rids = case["rollout_id"] or list(range(len(raw)))
    if not o["rewards_normalization"] or o["estimator"] not in (
            "grpo", "gspo", "reinforce_plus_plus_baseline"):
        return {"rewards": list(raw)}
    use_std = (o["estimator"] in ("grpo", "gspo") and o["grpo_std_normalization"]
               and o["n_samples_per_prompt"] != 1)
    out = [0.0] * len(raw)
    for g in sorted(set(case["group_index"])):
        members = [i for i, gi in enumerate(case["group_index"]) if gi == g]
        rollout_order, reward_of = [], {}
        for i in members:
            if rids[i] not in reward_of:
                rollout_order.append(rids[i])
                reward_of[rids[i]] = raw[i]
        r = [reward_of[rid] for rid in rollout_order]
        k = len(r)
        if all(x == r[0] for x in r):
            adv = [0.0] * k  # the spec: a group whose rewards are all equal gets 0
        else:
            mu = sum(r) / k
            adv = [x - mu for x in r]
            if use_std and k > 1:
                sd = math.sqrt(sum(a * a for a in adv) / (k - 1))
                if sd > 0:
                    adv = [a / (sd + 1e-6) for a in adv]
        by_rid = dict(zip(rollout_order, adv))
        for i in members:
            out[i] = by_rid[rids[i]]
    return {"rewards": out}


# ---------------------------------------------------------------- 6.3 KL estimators
def approx_kl(logp, logp_base, kind):
    d = logp - logp_base
    if kind == "k1":
        return d
    if kind == "k2":
        return d * d / 2.0
    if kind == "k3":
        return torch.exp(-d) - 1 - (-d)
    if kind == "low_var_kl":
        e = torch.clamp(-d, min=-20, max=20)
        return torch.clamp(torch.exp(e) - 1 - e, min=-10, max=10)
    raise ValueError(kind)


def kl_case(case):
    return {"kl": approx_kl(t32(case["logp"]), t32(case["logp_base"]), case["type"]).tolist()}


def split(values, lengths):
    out, start = [], 0
    for n in lengths:
        out.append(values[start:start + n])
        start += n
    return out


# ---------------------------------------------------------------- 6.4 advantages
def advantages_case(case):
    o = case["options"]
    lengths = case["lengths"]
    masks = split(t32(case["mask"]), lengths)
    kl_coef = o["kl_coef"]
    if kl_coef != 0:
        kls = split(approx_kl(t32(case["log_probs"]), t32(case["ref_log_probs"]), o["kl_type"]),
                    lengths)
    per_sample = []
    for i, n in enumerate(lengths):
        m = masks[i]
        reward = torch.tensor(case["rewards"][i], dtype=F32)
        kl_pen = -kl_coef * (kls[i] * m) if kl_coef != 0 else torch.zeros(n, dtype=F32)
        if o["estimator"] in ("grpo", "gspo"):
            a = reward.expand(n).clone()
        elif o["estimator"] == "reinforce_plus_plus_baseline":
            a = reward + kl_pen
        else:  # reinforce_plus_plus
            r = kl_pen.clone()
            ones = [t for t in range(n) if m[t] != 0]
            if ones:
                r[ones[-1]] += reward
            a = torch.zeros(n, dtype=F32)
            g = torch.tensor(0.0, dtype=F32)
            for t in reversed(range(n)):
                g = r[t] + o["gamma"] * g
                a[t] = g
        per_sample.append(a)
    adv = torch.cat(per_sample) if per_sample else torch.zeros(0, dtype=F32)
    if o["normalize_advantages"]:
        m = t32(case["mask"]).double()
        a64 = adv.double()
        cnt = m.sum().item()
        if cnt > 0:
            mean = (a64 * m).sum().item() / cnt
            var = ((a64 - mean) ** 2 * m).sum().item() / (cnt - 1) if cnt > 1 else 0.0
            adv = (adv - mean) * (1.0 / math.sqrt(var + 1e-8))
    return {"advantages": adv.tolist()}


# ---------------------------------------------------------------- 6.5 / 6.6 loss
def sample_loss_terms(o, lp, old, adv, m):
    """Per-token pg loss, clip indicator and ppo_kl of one sample."""
    kl = torch.nan_to_num((old - lp) * m, nan=0.0, posinf=0.0, neginf=0.0)
    if o["sequence_level_ratio"]:
        kl = ((kl * m).sum() / torch.clamp(m.sum(), min=1)).expand(len(lp))
    ratio = torch.exp(torch.clamp(-kl, -20, 20))
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - o["eps_clip"], 1 + o["eps_clip_high"])
    loss = torch.maximum(l1, l2)
    clip = (l2 > l1).to(F32)
    if o["eps_clip_c"] is not None:
        l3 = -adv * o["eps_clip_c"]
        loss = torch.where(adv < 0, torch.minimum(loss, l3), loss)
    return loss, clip, kl.detach()


def loss_case(case):
    o = dict(case["options"])
    if o["eps_clip_high"] is None:
        o["eps_clip_high"] = o["eps_clip"]
    lengths = case["lengths"]
    lp_all = t32(case["log_probs"]).requires_grad_(True)
    ent_all = t32(case["entropy"]).requires_grad_(True) if case["entropy"] else None
    cols = {k: split(t32(case[k]), lengths) if case[k] else None
            for k in ("mask", "old_log_probs", "advantages", "ref_log_probs", "rollout_log_probs")}
    lps = split(lp_all, lengths)
    ents = split(ent_all, lengths) if ent_all is not None else None

    def reduce(per_sample_values):
        """Σ over samples of the masked token mean (or the masked token sum)."""
        total = torch.tensor(0.0, dtype=F32)
        for x, m in zip(per_sample_values, cols["mask"]):
            s = (x * m).sum()
            total = total + (s if o["calculate_per_token_loss"] else s / max(1.0, m.sum().item()))
        return total

    pg, clip, ppo_kl, tis_w, tis_clip, tis_abs, ess, opsm = [], [], [], [], [], [], [], []
    for i in range(len(lengths)):
        m, old, adv = cols["mask"][i], cols["old_log_probs"][i], cols["advantages"][i]
        loss, c, k = sample_loss_terms(o, lps[i], old, adv, m)
        # ESS of w = exp(-ppo_kl) over the sample's N masked tokens: (Σw)² / (N Σw²).
        w = torch.exp(-k)[m != 0]
        n_tok = len(w)
        e = (w.sum() ** 2 / (n_tok * (w * w).sum())) if n_tok else torch.tensor(0.0)
        ess.append(e.to(F32).expand(len(m)))
        if o["use_opsm"]:
            seq_kl = (k * m).sum() / torch.clamp(m.sum(), min=1)
            drop = ((adv < 0) & (seq_kl > o["opsm_delta"])).to(F32)
            loss = loss * (1 - drop)
            opsm.append(drop)
        if o["use_tis"]:
            raw = torch.exp(old - cols["rollout_log_probs"][i])
            w = torch.clamp(raw, o["tis_clip_low"], o["tis_clip"])
            loss = loss * w
            tis_w.append(w)
            tis_clip.append((w != raw).to(F32))
            tis_abs.append((raw - 1).abs())
        pg.append(loss)
        clip.append(c)
        ppo_kl.append(k)
    metrics = {"pg_loss": reduce(pg), "pg_clipfrac": reduce(clip), "ppo_kl": reduce(ppo_kl),
               "ess_ratio": reduce(ess)}
    if o["use_opsm"]:
        metrics["opsm_clipfrac"] = reduce(opsm)
    if cols["rollout_log_probs"] is not None:
        olds, rolls = cols["old_log_probs"], cols["rollout_log_probs"]
        metrics["train_rollout_logprob_abs_diff"] = reduce(
            [(a - b).abs() for a, b in zip(olds, rolls)])
        metrics["train_rollout_kl"] = reduce(
            [approx_kl(b, a, "low_var_kl") for a, b in zip(olds, rolls)])
    total = metrics["pg_loss"]
    if ents is not None:
        metrics["entropy_loss"] = reduce(ents)
        total = total - o["entropy_coef"] * metrics["entropy_loss"]
    if o["use_kl_loss"]:
        kls = []
        for i in range(len(lengths)):
            kl = approx_kl(lps[i], cols["ref_log_probs"][i], o["kl_loss_type"])
            if o["use_unbiased_kl"]:
                kl = kl * torch.exp(lps[i] - cols["old_log_probs"][i])
            kls.append(kl)
        metrics["kl_loss"] = reduce(kls)
        total = total + o["kl_loss_coef"] * metrics["kl_loss"]
    if o["use_tis"]:
        metrics["tis"] = reduce(tis_w)
        metrics["tis_clipfrac"] = reduce(tis_clip)
        metrics["tis_abs"] = reduce(tis_abs)
        metrics["ois"] = reduce([torch.exp(-k) for k in ppo_kl])
    metrics["loss"] = total
    loss = total / case["normalizer"]
    loss.backward()
    out = {"loss": loss.item(), "metrics": {k: v.item() for k, v in metrics.items()},
           "grad_log_probs": lp_all.grad.tolist() if lp_all.grad is not None
           else [0.0] * len(case["log_probs"])}
    if ent_all is not None:
        out["grad_entropy"] = (ent_all.grad.tolist() if ent_all.grad is not None
                               else [0.0] * len(case["entropy"]))
    return out


KINDS = {"reward_norm": reward_norm, "kl": kl_case, "advantages": advantages_case,
         "loss": loss_case}


def main():
    plan_path, out_path = sys.argv[1], sys.argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    torch.set_num_threads(1)
    results = {c["name"]: KINDS[c["kind"]](c) for c in plan["cases"]}
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
