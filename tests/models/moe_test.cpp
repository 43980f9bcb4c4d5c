// Unit tests of the mixture-of-experts pieces (src/models/moe.{h,cpp}) on Qwen3-MoE models:
// the grouped expert GEMMs against a naive per-token loop, routing record/replay through
// MoeTrace (bit-exact replay, replay against a changed router, replay under activation
// checkpointing, -1 rows, bad replays), the load-balancing loss against transformers'
// load_balancing_loss_func (oracle), and config validation.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include "common/random_models.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/moe.h"
#include "models/registry.h"

namespace furlong::models {
namespace {

using testing::error_of;

// E = 8 experts, K = 2 per token; layer 1 dense (mlp_only_layers), layers 0 and 2 sparse.
Json moe_config() {
  return testing::tiny_model_config(testing::TinyFamily::kQwen3Moe,
                                    {{"vocab_size", 61},
                                     {"hidden_size", 32},
                                     {"intermediate_size", 48},
                                     {"moe_intermediate_size", 16},
                                     {"head_dim", 8},
                                     {"max_position_embeddings", 128},
                                     {"tie_word_embeddings", false},
                                     {"initializer_range", 0.3}});
}

std::unique_ptr<CausalLM> random_moe_model(uint64_t seed = 3) {
  return furlong::testing::random_model(moe_config(), seed);
}

PackedBatch test_batch() {
  return PackedBatch::from_documents(
      {{1, 5, 7, 9, 2, 44, 13, 8, 30, 2, 17}, {3, 3, 8, 50, 21, 4}, {60, 12, 6, 9, 33, 11, 0}});
}

std::shared_ptr<MoeTrace> recording() {
  auto t = std::make_shared<MoeTrace>();
  t->record = true;
  return t;
}
std::shared_ptr<MoeTrace> replaying(const at::Tensor& ids_PLK, bool record = true) {
  auto t = std::make_shared<MoeTrace>();
  t->replay_PLK = ids_PLK;
  t->record = record;
  return t;
}

// [P, L, K] of the trace's recorded ids (-1 for dense layers).
at::Tensor recorded(const CausalLM& model, const MoeTrace& trace) {
  return trace.recorded_PLK(model.config().num_hidden_layers, model.config().moe.experts_per_token);
}

// Adds noise to every router so that free routing changes for some tokens.
void perturb_routers(CausalLM& model, double scale) {
  c10::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(99);
  for (auto& [name, t] : model.named_weights()) {
    if (name.ends_with(".mlp.gate.weight")) t.add_(at::empty_like(t).normal_(0, scale, gen));
  }
}

// Number of (token, sparse layer) rows whose expert ids differ (as ordered lists).
int64_t rows_differing(const at::Tensor& a_PLK, const at::Tensor& b_PLK) {
  return (a_PLK != b_PLK).any(-1).sum().item<int64_t>();
}

std::vector<at::Tensor> grads_of(const CausalLM& model) {
  std::vector<at::Tensor> g;
  for (const auto& [name, t] : model.named_weights()) {
    g.push_back(t.grad().defined() ? t.grad().clone() : at::Tensor());
  }
  return g;
}

at::Tensor logits_loss(const CausalLM& model, const PackedBatch& batch, const ForwardOptions& o) {
  return at::log_softmax(model.forward_logits(batch, o), -1).select(1, 4).sum();
}

TEST(Moe, GroupedExpertsEqualsANaivePerTokenLoop) {
  const int64_t P = 23, D = 16, E = 6, K = 2, F = 12;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  auto x_PD = at::empty({P, D}).normal_(0, 1, gen);
  MoeParams params;
  params.router_ED = at::empty({E, D}).normal_(0, 0.5, gen);
  for (int64_t e = 0; e < E; ++e) {
    params.gate_FD.push_back(at::empty({F, D}).normal_(0, 0.3, gen));
    params.up_FD.push_back(at::empty({F, D}).normal_(0, 0.3, gen));
    params.down_DF.push_back(at::empty({D, F}).normal_(0, 0.3, gen));
  }
  MoeConfig moe;
  moe.num_experts = E;
  moe.experts_per_token = K;
  moe.expert_intermediate = F;
  auto routing = route_tokens(x_PD, params.router_ED, moe, {}, {});
  // Routing is not degenerate: the tokens use most experts.
  EXPECT_GE(at::bincount(routing.experts_PK.reshape(-1), {}, E).gt(0).sum().item<int64_t>(), E - 1);
  // The naive loop in float64 on the same fp32 inputs and routing weights: the exact value up
  // to float64 rounding. Per output, fp32 computes a chain of three reductions (gate/up: D
  // terms, down: F terms, the combine: K terms) plus silu and two products: its error is at most
  // gamma_prob(D + F + K + 3) times the output's absolute scale
  //   A_pd = sum_k |w_pk| sum_f |Wd_df| (|silu(g_f)| (|Wu||x|)_f + 1.1 |u_f| (|Wg||x|)_f),
  // (|silu'| <= 1.1), the first-order sensitivity to every rounding in the chain.
  auto x64 = x_PD.to(at::kDouble);
  auto ref_PD = at::zeros({P, D}, at::kDouble), abs_PD = at::zeros({P, D}, at::kDouble);
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t k = 0; k < K; ++k) {
      int64_t e = routing.experts_PK[p][k].item<int64_t>();
      double w = routing.weights_PK[p][k].item<double>();
      auto wg = params.gate_FD[e].to(at::kDouble), wu = params.up_FD[e].to(at::kDouble);
      auto wd = params.down_DF[e].to(at::kDouble);
      auto g = at::mv(wg, x64[p]), u = at::mv(wu, x64[p]);
      auto h = at::silu(g) * u;
      ref_PD[p] += w * at::mv(wd, h);
      auto sens = at::silu(g).abs() * at::mv(wu.abs(), x64[p].abs()) +
                  1.1 * u.abs() * at::mv(wg.abs(), x64[p].abs());
      abs_PD[p] += std::abs(w) * at::mv(wd.abs(), sens);
    }
  }
  double bound_factor = testing::tol::gamma_prob(D + F + K + 3, testing::tol::kUFp32);
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "aten");
    auto y_PD = grouped_experts(x_PD, routing, params, fused, {});
    auto excess = ((y_PD.to(at::kDouble) - ref_PD).abs() - bound_factor * abs_PD).max();
    EXPECT_LE(excess.item<double>(), 0.0);
    testing::tol::noted("grouped_experts_vs_loop",
                        testing::max_abs_diff(y_PD, ref_PD.to(at::kFloat)),
                        (bound_factor * abs_PD).max().item<double>());
  }
}

TEST(Moe, ReplayOfRecordedIdsReproducesTheLogitsBitExactly) {
  auto model = random_moe_model();
  auto batch = test_batch();
  c10::NoGradGuard no_grad;
  auto rec = recording();
  auto free_logits = model->forward_logits(batch, {.moe = rec});
  auto ids_PLK = recorded(*model, *rec);
  ASSERT_EQ(ids_PLK.sizes(), (std::vector<int64_t>{batch.num_tokens(), 3, 2}));
  EXPECT_TRUE((ids_PLK.select(1, 1) == -1).all().item<bool>()) << "layer 1 is dense";
  EXPECT_TRUE((ids_PLK.select(1, 0) >= 0).all().item<bool>());
  auto rep = replaying(ids_PLK);
  auto replay_logits = model->forward_logits(batch, {.moe = rep});
  EXPECT_TRUE(at::equal(free_logits, replay_logits));
  EXPECT_TRUE(at::equal(recorded(*model, *rep), ids_PLK));
  // int32 ids (RoutedExperts' type) replay the same.
  auto rep32 = replaying(ids_PLK.to(at::kInt));
  EXPECT_TRUE(at::equal(model->forward_logits(batch, {.moe = rep32}), free_logits));
}

TEST(Moe, ReplayUsesTheRecordedIdsAfterTheRouterChangedAndTheRouterStillGetsGradient) {
  auto model = random_moe_model();
  auto batch = test_batch();
  auto rec = recording();
  {
    c10::NoGradGuard no_grad;
    model->forward_logits(batch, {.moe = rec});
  }
  auto ids_PLK = recorded(*model, *rec);
  perturb_routers(*model, 0.3);
  // Free routing of the changed router differs for some tokens (else the test proves nothing).
  auto moved = recording();
  at::Tensor free_logits;
  {
    c10::NoGradGuard no_grad;
    free_logits = model->forward_logits(batch, {.moe = moved});
  }
  int64_t changed = rows_differing(recorded(*model, *moved), ids_PLK);
  RecordProperty("rows_with_changed_free_routing", std::to_string(changed));
  EXPECT_GE(changed, 5);
  // Replay: exactly the recorded ids, and the router (weights = its own probabilities at those
  // ids, renormalized) gets a nonzero gradient.
  model->set_requires_grad(true);
  auto rep = replaying(ids_PLK);
  auto loss = logits_loss(*model, batch, {.moe = rep});
  EXPECT_TRUE(at::equal(recorded(*model, *rep), ids_PLK));
  loss.backward();
  int routers = 0;
  for (const auto& [name, t] : model->named_weights()) {
    if (!name.ends_with(".mlp.gate.weight")) continue;
    ++routers;
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_GT(t.grad().abs().max().item<double>(), 0.0) << name;
  }
  EXPECT_EQ(routers, 2);
}

TEST(Moe, ReplayUnderActivationCheckpointingGivesTheSameGradients) {
  auto base = random_moe_model();
  auto batch = test_batch();
  auto rec = recording();
  {
    c10::NoGradGuard no_grad;
    base->forward_logits(batch, {.moe = rec});
  }
  auto ids_PLK = recorded(*base, *rec);
  std::vector<at::Tensor> grads[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    auto model = random_moe_model();
    perturb_routers(*model, 0.3);  // free routing now differs: the recomputation must replay
    model->set_requires_grad(true);
    auto rep = replaying(ids_PLK);
    logits_loss(*model, batch, {.activation_checkpointing = ckpt == 1, .moe = rep}).backward();
    // The recomputed forward in backward recorded again: still the replayed ids.
    EXPECT_TRUE(at::equal(recorded(*model, *rep), ids_PLK));
    grads[ckpt] = grads_of(*model);
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  // As in Models.ActivationCheckpointingGivesIdenticalGradients: the same kernels on the same
  // shapes, so equal up to the order a weight's gradient contributions are accumulated in.
  for (size_t i = 0; i < grads[0].size(); ++i) {
    ASSERT_EQ(grads[0][i].defined(), grads[1][i].defined()) << i;
    if (!grads[0][i].defined()) continue;
    EXPECT_TRUE(at::allclose(grads[0][i], grads[1][i], 0, 1e-7)) << i;
  }
}

// Free routing with the load-balancing loss's router probabilities collected (a second output
// of each checkpointed block): checkpointing changes neither the routing nor any gradient.
TEST(Moe, FreeRoutingAndLoadBalancingUnderCheckpointingGiveIdenticalGradients) {
  auto batch = test_batch();
  std::vector<at::Tensor> grads[2];
  at::Tensor ids[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    auto model = random_moe_model();
    model->set_requires_grad(true);
    auto trace = recording();
    trace->collect_router_probs = true;
    auto loss = logits_loss(*model, batch, {.activation_checkpointing = ckpt == 1, .moe = trace});
    (loss + 0.1 * load_balancing_loss(*trace, 8, 2)).backward();
    ids[ckpt] = recorded(*model, *trace);
    grads[ckpt] = grads_of(*model);
  }
  EXPECT_TRUE(at::equal(ids[0], ids[1]));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {  // tolerance: as in the replay test above
    ASSERT_EQ(grads[0][i].defined(), grads[1][i].defined()) << i;
    if (!grads[0][i].defined()) continue;
    EXPECT_TRUE(at::allclose(grads[0][i], grads[1][i], 0, 1e-7)) << i;
  }
}

TEST(Moe, RowsOfMinusOneFallBackToFreeRouting) {
  auto model = random_moe_model();
  auto batch = test_batch();
  c10::NoGradGuard no_grad;
  auto rec = recording();
  model->forward_logits(batch, {.moe = rec});
  auto ids_PLK = recorded(*model, *rec);
  perturb_routers(*model, 0.3);
  auto moved = recording();
  model->forward_logits(batch, {.moe = moved});
  auto free_PLK = recorded(*model, *moved);
  // Unknown rows: the last token of each document (what a rollout never ran) and up to three
  // tokens whose free choice in layer 0 changed with the router (so the fallback is visible).
  auto changed_P = (free_PLK.select(1, 0) != ids_PLK.select(1, 0)).any(-1).nonzero().squeeze(1);
  ASSERT_GT(changed_P.numel(), 0);
  auto unknown_P = at::zeros({batch.num_tokens()}, at::kBool);
  for (int64_t i = 0; i < std::min<int64_t>(3, changed_P.numel()); ++i) {
    unknown_P[changed_P[i].item<int64_t>()] = true;
  }
  for (int64_t d = 0; d < batch.num_documents(); ++d) unknown_P[batch.cu_seqlens[d + 1] - 1] = true;
  auto replay_PLK = at::where(unknown_P.view({-1, 1, 1}), at::full_like(ids_PLK, -1), ids_PLK);
  auto rep = replaying(replay_PLK);
  auto logits = model->forward_logits(batch, {.moe = rep});
  auto used_PLK = recorded(*model, *rep);
  // Layer 0 (the first sparse layer) sees the same input as in the free forward, so its -1 rows
  // are exactly the free choices and the other rows exactly the replayed ones.
  auto expected_PK =
      at::where(unknown_P.view({-1, 1}), free_PLK.select(1, 0), ids_PLK.select(1, 0));
  EXPECT_TRUE(at::equal(used_PLK.select(1, 0), expected_PK));
  // Layer 2's input depends on layer 0's routing, so its free choices are the router's own on
  // the replayed forward: valid ids, and the known rows replayed.
  auto known_P = ~unknown_P;
  EXPECT_TRUE((used_PLK.select(1, 2) >= 0).all().item<bool>());
  EXPECT_TRUE(
      at::equal(used_PLK.select(1, 2).index({known_P}), ids_PLK.select(1, 2).index({known_P})));
  // Replaying what was used (no -1 rows) reproduces the forward bit-exactly.
  EXPECT_TRUE(at::equal(model->forward_logits(batch, {.moe = replaying(used_PLK)}), logits));
}

TEST(Moe, BadReplaysFailWithClearErrors) {
  auto model = random_moe_model();
  auto batch = test_batch();
  c10::NoGradGuard no_grad;
  const int64_t P = batch.num_tokens();
  auto good = at::zeros({P, 3, 2}, at::kLong);
  auto run = [&](const at::Tensor& ids) {
    return error_of([&] { model->forward_logits(batch, {.moe = replaying(ids, false)}); });
  };
  struct Bad {
    at::Tensor ids;
    std::string expected;
  };
  std::vector<Bad> cases = {
      {at::zeros({P - 1, 3, 2}, at::kLong), "routing replay: expected expert ids"},
      {at::zeros({P, 3, 3}, at::kLong), "2 experts per token"},
      {at::zeros({P, 1, 2}, at::kLong), "routing replay: expected expert ids"},
      {at::zeros({P, 2}, at::kLong), "routing replay: expected expert ids"},
      {good.clone().index_fill_(0, at::tensor({int64_t{4}}), 8), "expected [0, 8)"},
      {good.clone().index_fill_(0, at::tensor({int64_t{4}}), -2), "expected [0, 8)"},
  };
  for (const auto& c : cases) {
    auto msg = run(c.ids);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.ids.sizes() << ": " << msg;
  }
  EXPECT_NE(run(good.clone().index_fill_(0, at::tensor({int64_t{4}}), 8)).find("layer 0"),
            std::string::npos);
}

TEST(Moe, ConfigErrorsNameTheField) {
  struct Bad {
    const char* field;
    Json value;
    std::string expected;
  };
  std::vector<Bad> cases = {
      {"num_experts_per_tok", 9, "field 'num_experts_per_tok' must be in [1, num_experts = 8]"},
      {"num_experts_per_tok", 0, "field 'num_experts_per_tok'"},
      {"num_experts", 0, "field 'num_experts' must be positive"},
      {"moe_intermediate_size", -1, "field 'moe_intermediate_size' must be positive"},
      {"decoder_sparse_step", 0, "field 'decoder_sparse_step' must be positive"},
      {"mlp_only_layers", Json::array({0, 3}), "field 'mlp_only_layers' names layer 3"},
      {"mlp_only_layers", Json::array({-1}), "field 'mlp_only_layers' names layer -1"},
  };
  for (const auto& c : cases) {
    auto cfg = moe_config();
    cfg[c.field] = c.value;
    auto msg = error_of([&] { create_model(cfg, "m/config.json"); });
    EXPECT_NE(msg.find("m/config.json: " + c.expected), std::string::npos) << msg;
  }
  // transformers 5 spells the expert count "num_local_experts".
  auto cfg = moe_config();
  cfg.erase("num_experts");
  cfg["num_local_experts"] = 6;
  EXPECT_EQ(create_model(cfg, "m")->config().moe.num_experts, 6);
}

// Load-balancing loss against transformers' load_balancing_loss_func on a transformers-made
// model (oracle, scripts/oracles/hf_model_oracle.py), and its router-weight gradients, with and
// without activation checkpointing.
TEST(Moe, LoadBalancingLossEqualsTransformersWithAndWithoutCheckpointing) {
  std::vector<std::vector<int64_t>> docs = {{5, 17, 3, 88, 41, 9, 60, 2, 71, 13, 30, 8},
                                            {44, 4, 19, 93, 27, 6, 51}};
  auto config = moe_config();
  config["vocab_size"] = 97;
  config["hidden_size"] = 64;
  config["head_dim"] = 16;
  config["initializer_range"] = 0.1;
  config["rms_norm_eps"] = 1e-6;
  Json plan = Json::array({{{"name", "lb"},
                            {"mode", "create"},
                            {"config", config},
                            {"seed", 21},
                            {"dtype", "float32"},
                            {"attn", "sdpa"},
                            {"perturb", true},
                            {"documents", docs},
                            {"want", {"logits", "routing", "load_balancing"}}}});
  auto dir = testing::cached_oracle(
      "moe_load_balancing", "oracles/hf_model_oracle.py", plan.dump(), [&](const auto& d) {
        write_file_atomic(d / "plan.json", plan.dump());
        return std::vector<std::string>{(d / "plan.json").string(), d.string()};
      });
  auto ref = io::SafetensorsFile::open(dir / "lb" / "outputs.safetensors");
  auto batch = PackedBatch::from_documents(docs);
  const int64_t E = 8, K = 2, L = 3;
  double ref_loss = ref->tensor("load_balancing_loss").item<double>();
  // Bound: the loss is E sum_e f_e p_e with f_e the (exact, integer-count) routing shares, given
  // the same routing (asserted), and p_e the mean router probability. furlong's router logits
  // are within dz = 2 budget(router_abs_scale) of transformers' (ModelParity's derivation: 13
  // reductions per layer of at most k_max = 64 terms), so each probability moves by at most
  // 2 dz p (|dp_i| <= p_i (|dz_i| + max|dz|)) and the loss by at most 2 dz itself; the means over
  // T tokens and L layers and the final E-term sum add gamma_prob(T + L + E) relative, per side.
  double budget = testing::tol::gamma_prob((13.0 * L + 2) * 64, testing::tol::kUFp32) *
                  ref->tensor("router_abs_scale").item<double>();
  double dz = 2 * budget;
  double tol =
      (2 * dz + 2 * testing::tol::gamma_prob(batch.num_tokens() + L + E, testing::tol::kUFp32)) *
      ref_loss;
  for (bool ckpt : {false, true}) {
    SCOPED_TRACE(ckpt ? "activation checkpointing" : "no checkpointing");
    auto model = load_hf_model(dir / "lb" / "model", {.dtype = at::kFloat});
    model->set_requires_grad(true);
    auto trace = std::make_shared<MoeTrace>();
    trace->record = true;
    trace->collect_router_probs = true;
    model->forward_hidden(batch, {.activation_checkpointing = ckpt, .moe = trace});
    ASSERT_TRUE(at::equal(recorded(*model, *trace), ref->tensor("routing")));
    auto loss = load_balancing_loss(*trace, E, K);
    double err = std::abs(loss.item<double>() - ref_loss);
    RecordProperty(std::string(ckpt ? "ckpt_" : "") + "lb_loss_abs_err", std::to_string(err));
    RecordProperty("lb_loss_tol", std::to_string(tol));
    EXPECT_LE(testing::tol::noted("load_balancing_loss", err, tol), tol);
    EXPECT_GT(ref_loss, 1.05 * K) << "the routing should be unbalanced enough to matter";
    loss.backward();
    // Router gradients: norm-wise relative error, the 1e-4 of ModelParity's gradients (the
    // same reductions, run about twice in backward).
    int routers = 0;
    for (const auto& [name, t] : model->named_weights()) {
      if (!name.ends_with(".mlp.gate.weight")) continue;
      ++routers;
      auto ref_grad = ref->tensor("lb_grad." + name);
      ASSERT_TRUE(t.grad().defined()) << name;
      double rel = (t.grad() - ref_grad).norm().item<double>() / ref_grad.norm().item<double>();
      RecordProperty(std::string(ckpt ? "ckpt_" : "") + name + "_lb_grad_rel_err",
                     std::to_string(rel));
      EXPECT_LE(testing::tol::noted("load_balancing_grad_rel", rel, 1e-4), 1e-4) << name;
    }
    EXPECT_EQ(routers, 2);
  }
}

}  // namespace
}  // namespace furlong::models
