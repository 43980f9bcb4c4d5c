// Mixture-of-experts pieces: the top-k router, the grouped expert computation, and the
// MoeTrace through which a forward records or replays its expert choices (routing replay).
//
// Shapes: P = packed tokens, D = model dim, E = experts, K = experts per token (top-k),
// F = expert MLP hidden dim, L = decoder layers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "models/layers.h"
#include "models/model_config.h"

namespace furlong::models {

// What one forward does with its expert choices. A trace is shared (std::shared_ptr) by every
// block of a forward, and by the recomputation of a checkpointed block in backward, so that
// the recomputed forward replays exactly what the first one used.
struct MoeTrace {
  // Replay: when defined, int64/int32 [P, L, K] expert ids that every MoE layer uses instead of
  // its own top-k (rows of dense layers are ignored). A row whose ids are all -1 falls back to
  // the layer's own top-k (e.g. the last token of a rollout, which the engine never ran).
  at::Tensor replay_PLK;
  // Record: when true, each MoE layer stores the ids it used in recorded[layer] (int64 [P, K]).
  bool record = false;
  std::vector<at::Tensor> recorded;  // indexed by layer; undefined for dense layers
  // Router load per MoE layer: tokens routed to each expert, int64 [E] (always filled).
  std::vector<at::Tensor> tokens_per_expert;
  // Load-balancing loss inputs: when true, each MoE layer stores the mean over tokens of its
  // router probabilities, fp32 [E], with autograd history (also under checkpointing).
  bool collect_router_probs = false;
  std::vector<at::Tensor> mean_router_probs;
  // Replay check (miles' --ci-test): when true, each MoE layer that replays also computes its
  // own top-k and counts the tokens whose free choice shares no expert with the replayed ids
  // (rows that are all -1 are not checked). Summed over layers and forwards (the recomputation
  // of a checkpointed block counts again, as miles' backward-stage check does).
  bool check_replay = false;
  int64_t replay_checked_tokens = 0;
  int64_t replay_mismatched_tokens = 0;

  // [P, L, K] int64 of the recorded ids, -1 in the rows of dense layers (P from the first MoE
  // layer's record). Requires record and at least one MoE layer.
  at::Tensor recorded_PLK(int64_t num_layers, int64_t top_k) const;
};

// Parameters of one sparse MLP: the router and E experts' SwiGLU weights, in HF's per-expert
// layout (mlp.gate.weight [E, D], mlp.experts.<e>.{gate,up}_proj.weight [F, D], down [D, F]).
struct MoeParams {
  at::Tensor router_ED;
  std::vector<at::Tensor> gate_FD, up_FD, down_DF;  // one per expert
};

// Router: softmax(x W^T) in fp32, top-k (or the replayed ids), weights optionally renormalized
// over the k chosen, cast to x's dtype. Mirrors transformers' Qwen3MoeTopKRouter.
struct Routing {
  at::Tensor logits_PE;   // x's dtype
  at::Tensor probs_PE;    // fp32 softmax
  at::Tensor weights_PK;  // x's dtype
  at::Tensor experts_PK;  // int64
};
Routing route_tokens(const at::Tensor& x_PD, const at::Tensor& router_ED, const MoeConfig& moe,
                     const at::Tensor& replay_PK, const LinearFn& linear);

// sum_k weights[p, k] * expert_{experts[p, k]}(x[p]): tokens are grouped by expert (one stable
// sort) and each expert with tokens runs one GEMM per projection over its rows; with
// `grouped` set (and not declining), each projection is one call over all experts' rows.
at::Tensor grouped_experts(const at::Tensor& x_PD, const Routing& routing, const MoeParams& params,
                           bool fused, const LinearFn& linear, const GroupedLinearFn& grouped = {});

// The sparse MLP of one layer, recording into / replaying from `trace` (may be null).
at::Tensor sparse_moe_mlp(int64_t layer, const at::Tensor& x_PD, const MoeParams& params,
                          const MoeConfig& moe, MoeTrace* trace, bool fused, const LinearFn& linear,
                          const GroupedLinearFn& grouped = {});

// Switch-Transformer load-balancing loss as transformers' load_balancing_loss_func computes
// it over all MoE layers of one forward: E * sum_e f_e * p_e, where f_e is the share of top-k
// assignments to expert e and p_e the mean router probability, both averaged over the layers.
at::Tensor load_balancing_loss(const MoeTrace& trace, int64_t num_experts, int64_t top_k);

}  // namespace furlong::models
