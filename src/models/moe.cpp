#include "models/moe.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "kernels/cpu_kernels.h"
#include "kernels/fused_ops.h"

namespace furlong::models {
namespace {

// Replayed ids for one layer, validated: int64 [P, K] in [0, E) or -1 (fall back).
at::Tensor replay_ids_of_layer(const MoeTrace& trace, int64_t layer, int64_t P,
                               const MoeConfig& moe) {
  const auto& r = trace.replay_PLK;
  FURLONG_CHECK(
      r.dim() == 3 && r.size(0) == P && r.size(1) > layer && r.size(2) == moe.experts_per_token,
      "routing replay: expected expert ids [", P, " tokens, > ", layer, " layers, ",
      moe.experts_per_token, " experts per token], got ", r.sizes());
  auto ids_PK = r.select(1, layer).to(at::kLong);
  auto lo = ids_PK.min().item<int64_t>(), hi = ids_PK.max().item<int64_t>();
  FURLONG_CHECK(lo >= -1 && hi < moe.num_experts, "routing replay: layer ", layer,
                " has expert ids in [", lo, ", ", hi, "], expected [0, ", moe.num_experts,
                ") (or -1 for tokens without a recorded routing)");
  return ids_PK;
}

void store(std::vector<at::Tensor>& slots, int64_t layer, at::Tensor value) {
  if (static_cast<int64_t>(slots.size()) <= layer) slots.resize(layer + 1);
  slots[layer] = std::move(value);
}

}  // namespace

at::Tensor MoeTrace::recorded_PLK(int64_t num_layers, int64_t top_k) const {
  FURLONG_ASSERT(record, "MoeTrace::recorded_PLK on a trace that does not record");
  int64_t P = -1;
  for (const auto& t : recorded) {
    if (t.defined()) {
      P = t.size(0);
      break;
    }
  }
  FURLONG_ASSERT(P >= 0, "MoeTrace::recorded_PLK: no MoE layer recorded anything");
  auto out_PLK = at::full({P, num_layers, top_k}, -1, at::kLong);
  for (int64_t l = 0; l < num_layers && l < static_cast<int64_t>(recorded.size()); ++l) {
    if (recorded[l].defined()) out_PLK.select(1, l).copy_(recorded[l]);
  }
  return out_PLK;
}

Routing route_tokens(const at::Tensor& x_PD, const at::Tensor& router_ED, const MoeConfig& moe,
                     const at::Tensor& replay_PK, const LinearFn& linear) {
  Routing r;
  r.logits_PE = apply_linear(linear, x_PD, router_ED, {});
  r.probs_PE = at::softmax(r.logits_PE, -1, at::kFloat);
  at::Tensor weights_PK;
  if (replay_PK.defined()) {
    // Replayed ids; the weights are still this router's probabilities at those ids, so the
    // router gets its gradient through them (miles' replay keeps them differentiable).
    auto ids_PK = replay_PK;
    auto missing_P = (replay_PK < 0).any(-1);
    if (missing_P.any().item<bool>()) {
      auto free_PK = std::get<1>(at::topk(r.probs_PE, moe.experts_per_token, -1));
      ids_PK = at::where(missing_P.unsqueeze(-1), free_PK, replay_PK);
    }
    r.experts_PK = ids_PK;
    weights_PK = r.probs_PE.gather(1, ids_PK);
  } else {
    std::tie(weights_PK, r.experts_PK) = at::topk(r.probs_PE, moe.experts_per_token, -1);
  }
  if (moe.norm_topk_prob) weights_PK = weights_PK / weights_PK.sum(-1, /*keepdim=*/true);
  r.weights_PK = weights_PK.to(r.logits_PE.scalar_type());
  return r;
}

namespace {

// The experts' SwiGLU with each projection as one grouped call over the sorted rows; undefined
// when `grouped` declines a projection (nothing computed is kept then).
at::Tensor grouped_swiglu(const at::Tensor& x_AD, const MoeParams& params,
                          const std::vector<int64_t>& rows_E, bool fused,
                          const GroupedLinearFn& grouped) {
  auto gate_AF = grouped(x_AD, params.gate_FD, rows_E);
  if (!gate_AF.defined()) return {};
  auto up_AF = grouped(x_AD, params.up_FD, rows_E);
  if (!up_AF.defined()) return {};
  auto hidden_AF = fused && kernels::supported(gate_AF) ? kernels::swiglu(gate_AF, up_AF)
                                                        : at::silu(gate_AF) * up_AF;
  return grouped(hidden_AF, params.down_DF, rows_E);
}

}  // namespace

at::Tensor grouped_experts(const at::Tensor& x_PD, const Routing& routing, const MoeParams& params,
                           bool fused, const LinearFn& linear, const GroupedLinearFn& grouped) {
  const int64_t K = routing.experts_PK.size(1);
  const auto E = static_cast<int64_t>(params.gate_FD.size());
  // Assignment a = p * K + k; sorted stably by expert, so each expert's rows are contiguous and
  // every token's contributions are summed in ascending expert order (as transformers does).
  auto expert_A = routing.experts_PK.reshape(-1);
  auto order_A = std::get<1>(at::sort(expert_A, std::optional<bool>(true), /*dim=*/0));
  auto token_A = at::floor_divide(order_A, K);
  auto counts_E = at::bincount(expert_A, {}, E).cpu();
  const auto* counts = counts_E.data_ptr<int64_t>();
  auto x_AD = x_PD.index_select(0, token_A);
  at::Tensor y_AD;
  if (grouped)
    y_AD = grouped_swiglu(x_AD, params, std::vector<int64_t>(counts, counts + E), fused, grouped);
  if (!y_AD.defined()) {
    std::vector<at::Tensor> outputs;
    int64_t offset = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (counts[e] == 0) continue;
      auto rows = x_AD.narrow(0, offset, counts[e]);
      outputs.push_back(swiglu_mlp(rows, params.gate_FD[e], {}, params.up_FD[e], {},
                                   params.down_DF[e], {}, fused, linear));
      offset += counts[e];
    }
    y_AD = outputs.size() == 1 ? outputs[0] : at::cat(outputs, 0);
  }
  auto weight_A1 = routing.weights_PK.reshape(-1).index_select(0, order_A).unsqueeze(1);
  y_AD = y_AD * weight_A1;
  return at::zeros_like(x_PD).index_add(0, token_A, y_AD.to(x_PD.scalar_type()));
}

at::Tensor sparse_moe_mlp(int64_t layer, const at::Tensor& x_PD, const MoeParams& params,
                          const MoeConfig& moe, MoeTrace* trace, bool fused, const LinearFn& linear,
                          const GroupedLinearFn& grouped) {
  at::Tensor replay_PK;
  if (trace != nullptr && trace->replay_PLK.defined()) {
    replay_PK = replay_ids_of_layer(*trace, layer, x_PD.size(0), moe);
  }
  auto routing = route_tokens(x_PD, params.router_ED, moe, replay_PK, linear);
  if (replay_PK.defined() && trace->check_replay) {
    // Overlap of the free top-k with the replayed ids, per token; -1 never matches an id.
    auto free_PK = std::get<1>(at::topk(routing.probs_PE.detach(), moe.experts_per_token, -1));
    auto overlap_P = (free_PK.unsqueeze(2) == replay_PK.unsqueeze(1)).any(2).any(1);
    auto checked_P = (replay_PK >= 0).any(-1);
    trace->replay_checked_tokens += checked_P.sum().item<int64_t>();
    trace->replay_mismatched_tokens += (checked_P & overlap_P.logical_not()).sum().item<int64_t>();
  }
  if (trace != nullptr) {
    if (trace->record) store(trace->recorded, layer, routing.experts_PK.detach());
    store(trace->tokens_per_expert, layer,
          at::bincount(routing.experts_PK.reshape(-1), {}, moe.num_experts));
    if (trace->collect_router_probs) {
      store(trace->mean_router_probs, layer, routing.probs_PE.mean(0));
    }
  }
  return grouped_experts(x_PD, routing, params, fused, linear, grouped);
}

at::Tensor load_balancing_loss(const MoeTrace& trace, int64_t num_experts, int64_t top_k) {
  FURLONG_ASSERT(trace.collect_router_probs, "load_balancing_loss: router probs not collected");
  at::Tensor assignments_E, probs_E;
  int64_t layers = 0;
  double rows = 0;
  for (size_t l = 0; l < trace.mean_router_probs.size(); ++l) {
    const auto& p = trace.mean_router_probs[l];
    if (!p.defined()) continue;
    auto counts = trace.tokens_per_expert[l].to(at::kFloat);
    assignments_E = assignments_E.defined() ? assignments_E + counts : counts;
    probs_E = probs_E.defined() ? probs_E + p : p;
    rows += counts.sum().item<double>() / static_cast<double>(top_k);
    ++layers;
  }
  FURLONG_ASSERT(layers > 0, "load_balancing_loss: no MoE layer ran");
  auto share_E = assignments_E / rows;  // top-k assignments per token, averaged over layers
  auto mean_prob_E = probs_E / static_cast<double>(layers);
  return (share_E * mean_prob_E).sum() * static_cast<double>(num_experts);
}

}  // namespace furlong::models
