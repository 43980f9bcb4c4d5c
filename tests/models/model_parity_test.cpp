// Parity of furlong's model code with HF transformers (the oracle), on tiny random models of
// every architecture: logits, next-token log-probs and gradients of a masked next-token loss.
//
// The oracle (scripts/oracles/hf_model_oracle.py) creates each model with transformers, writes
// it as a HF directory, and writes its outputs; furlong loads the same directory as-is.
//
// Tolerances (derived in tests/common/tolerances.h; docs/testing.md, "Tolerances and why"):
//  * fp32 logits: each implementation's rounding error against the exact logits of the same
//    weights is at most tol::forward_logits_budget: a logit passes through 9 reductions per
//    layer plus the final norm and the head (20 here) of at most k_max = 96 terms, whose
//    independent rounding errors sum to <= gamma_prob(20 * 96) ~ 6 sqrt(1920) u = 1.6e-5
//    relative to the logits' absolute scale max_j sum_k |h_k W_jk| (computed from furlong's final
//    hidden states and head, ~2-4 here). furlong vs transformers: twice that (triangle
//    inequality through the exact value). Observed ~1e-6.
//  * fp32 log-probs: lp = z_y - logsumexp(z) moves by at most 2 max|dz|, plus each side's
//    log_softmax rounding (tol::fp32_softmax_row_bound, V = 97).
//  * fp32 gradients: per parameter, ||g - g_hf|| / ||g_hf|| (norm-wise, so that near-zero
//    elements do not dominate). Backward runs each forward reduction about twice (input and
//    weight gradients), 2 * 20 reductions of <= 96 terms: 2 gamma_prob(3840) = 7.3e-6 for two
//    implementations without cancellation; the weight gradients sum T = 38 per-token
//    contributions of both signs, and sum |terms| / |sum| up to ~10 multiplies that, so 1e-4.
//  * bf16: two bf16 implementations of the same computation each carry bf16's own rounding
//    error relative to the exact (fp32) result, e = max|lp_hf_bf16 - lp_fp32|. By the triangle
//    inequality |lp_furlong - lp_hf| <= |lp_furlong - lp_fp32| + e, so if furlong is as accurate
//    as transformers (asserted separately with a 1.5x allowance for a different summation
//    order) the two differ by at most 2.5 e. Both assertions are made per case.
//
// Mixture-of-experts (Qwen3MoeForCausalLM, E = 8 experts, K = 2 per token, expert width 32,
// dense and sparse layers mixed by decoder_sparse_step / mlp_only_layers):
//  * reductions: a sparse block adds to the 9 of a dense one the router GEMM (D terms), the
//    router softmax's sum (E), the top-k renormalization (K) and the weighted combine of the K
//    expert outputs per token (index_add, K terms); each expert's SwiGLU is a dense MLP over its
//    own rows (gate/up over D, down over F = 32 <= k_max), counted already. So 13 per layer, with
//    the same k_max (E, K, F are all below it), for every layer of an MoE model (an upper bound
//    for its dense layers).
//  * routing is discrete: the bounds above hold only if both implementations choose the same
//    experts. The oracle writes transformers' routing (forward hooks on each router) and the
//    margin p_(K) - p_(K+1) of every choice; the tests compare routing first, token for token.
//    fp32: the router logits of the two differ by at most 2 budget(router_abs_scale) =: dz, and
//    softmax probabilities by |dp_i| <= p_i (|dz_i| + max|dz|) <= 2 dz p_i, so the k-th and
//    (k+1)-th choices can only swap where the margin p_(K) - p_(K+1) is below
//    2 dz (p_(K) + p_(K+1)); the test asserts that no margin is (no near-tie for these seeds).
//    bf16: router probabilities err by up to ~0.1 (transformers' own bf16 vs fp32), so near-ties
//    are common and either side's choice is "right"; the seeds are chosen so that furlong and
//    transformers route every token alike in bf16 (asserted: a mismatch prints its margin), and
//    only then are the log-probs compared as for the dense models.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "common/hf_oracle.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/logprobs.h"

namespace furlong::models {
namespace {

using testing::max_abs_diff;

struct Case {
  std::string name;
  Json config;
  std::string dtype = "float32";
  std::string attn = "sdpa";
  int seed = 0;
  bool grads = false;
};

Json tiny_config(testing::TinyFamily family, int kv_heads, bool tied) {
  return testing::tiny_model_config(family, {{"vocab_size", 97},
                                             {"intermediate_size", 96},
                                             {"num_key_value_heads", kv_heads},
                                             {"max_position_embeddings", 256},
                                             {"tie_word_embeddings", tied},
                                             {"initializer_range", 0.1},
                                             {"rms_norm_eps", 1e-6}});
}

std::vector<Case> all_cases() {
  auto qwen3 = [](int kv, bool tied) {
    auto c = tiny_config(testing::TinyFamily::kQwen3, kv, tied);
    c["head_dim"] = 24;  // N * H != D on purpose
    return c;
  };
  auto qwen2 = [](int kv, bool tied) { return tiny_config(testing::TinyFamily::kQwen2, kv, tied); };
  auto llama = [](int kv, bool tied) { return tiny_config(testing::TinyFamily::kLlama, kv, tied); };
  auto llama3_rope = [&](int kv, bool tied) {
    auto c = llama(kv, tied);
    c["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                            {"factor", 8.0},           {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8}};
    return c;
  };
  auto yarn_rope = [&](int kv, bool tied) {
    auto c = qwen2(kv, tied);
    c["rope_parameters"] = {{"rope_type", "yarn"},
                            {"rope_theta", 10000.0},
                            {"factor", 4.0},
                            {"original_max_position_embeddings", 8}};
    return c;
  };
  auto linear_rope = [&](int kv, bool tied) {
    auto c = qwen3(kv, tied);
    c["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 1000.0}, {"factor", 2.0}};
    return c;
  };
  // Qwen3-MoE: E = 8, K = 2; router weights perturbed by the oracle (std 0.3) so routing varies.
  auto qwen3_moe = [&](bool norm_topk, int step, std::vector<int64_t> mlp_only, int layers) {
    return testing::as_qwen3_moe(qwen3(2, false), {{"num_hidden_layers", layers},
                                                   {"norm_topk_prob", norm_topk},
                                                   {"decoder_sparse_step", step},
                                                   {"mlp_only_layers", mlp_only}});
  };
  return {
      {"qwen3_moe_norm_topk", qwen3_moe(true, 1, {1}, 3), "float32", "sdpa", 16, true},
      {"qwen3_moe_step2", qwen3_moe(false, 2, {}, 4), "float32", "eager", 12, true},
      {"qwen3_moe_bf16", qwen3_moe(true, 1, {0}, 3), "bfloat16", "sdpa", 13},
      {"qwen3_gqa_untied", qwen3(2, false), "float32", "sdpa", 1, true},
      {"qwen3_mha_tied_eager", qwen3(4, true), "float32", "eager", 2, true},
      {"qwen3_linear_rope", linear_rope(2, false), "float32", "sdpa", 3},
      {"qwen2_gqa_tied", qwen2(2, true), "float32", "sdpa", 4, true},
      {"qwen2_yarn_mha", yarn_rope(4, false), "float32", "sdpa", 5},
      {"llama3_gqa_untied", llama3_rope(2, false), "float32", "sdpa", 6, true},
      {"llama_mha_tied", llama(4, true), "float32", "eager", 7},
      {"qwen3_bf16", qwen3(2, false), "bfloat16", "sdpa", 8},
      {"qwen2_bf16", qwen2(2, true), "bfloat16", "sdpa", 9},
      {"llama3_bf16", llama3_rope(2, false), "bfloat16", "sdpa", 10},
  };
}

std::vector<std::vector<int64_t>> test_documents() {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int64_t> token(0, 96);
  std::vector<std::vector<int64_t>> docs;
  for (int len : {9, 23, 6}) {
    std::vector<int64_t> doc(len);
    for (auto& t : doc) t = token(rng);
    docs.push_back(doc);
  }
  return docs;
}

// Loss mask per document: every other token from the third on (so masking matters).
std::vector<std::vector<int64_t>> test_loss_mask(const std::vector<std::vector<int64_t>>& docs) {
  std::vector<std::vector<int64_t>> masks;
  for (const auto& d : docs) {
    std::vector<int64_t> m(d.size());
    for (size_t i = 0; i < d.size(); ++i) m[i] = (i >= 2 && i % 2 == 0) ? 1 : 0;
    masks.push_back(m);
  }
  return masks;
}

// The longest reduction in a block: hidden size, MLP width, attention width (heads * head_dim) or
// the longest document (attention over positions).
double k_max(const Json& config) {
  int64_t heads = config["num_attention_heads"].get<int64_t>();
  int64_t head_dim = config.contains("head_dim") ? config["head_dim"].get<int64_t>()
                                                 : config["hidden_size"].get<int64_t>() / heads;
  size_t longest = 0;
  for (const auto& d : test_documents()) longest = std::max(longest, d.size());
  return static_cast<double>(
      std::max({config["hidden_size"].get<int64_t>(), config["intermediate_size"].get<int64_t>(),
                heads * head_dim, static_cast<int64_t>(longest)}));
}

bool is_moe(const Json& config) {
  return config.contains("num_experts");
}

// One implementation's fp32 forward rounding budget per logit (tol::forward_logits_budget, with
// 13 reductions per layer for MoE models: header comment).
double logits_budget(const Json& config, double abs_scale) {
  int64_t layers = config["num_hidden_layers"].get<int64_t>();
  if (!is_moe(config)) {
    return testing::tol::forward_logits_budget(layers, k_max(config), abs_scale,
                                               testing::tol::kUFp32);
  }
  double reductions = 13.0 * static_cast<double>(layers) + 2;
  return testing::tol::gamma_prob(reductions * k_max(config), testing::tol::kUFp32) * abs_scale;
}

double max_logprob_rounding(const at::Tensor& ref_logits_TV) {
  return testing::max_logprob_rounding(ref_logits_TV, test_documents());
}

class ModelParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto docs = test_documents();
    Json plan = Json::array();
    for (const auto& c : all_cases()) {
      Json want = Json::array({"logits", "logprobs"});
      if (c.grads) want.push_back("grads");
      if (c.dtype == "bfloat16") want.push_back("fp32_reference");
      if (is_moe(c.config)) want.push_back("routing");
      plan.push_back({{"name", c.name},
                      {"mode", "create"},
                      {"config", c.config},
                      {"seed", c.seed},
                      {"dtype", c.dtype},
                      {"attn", c.attn},
                      {"perturb", true},
                      {"documents", docs},
                      {"loss_mask", test_loss_mask(docs)},
                      {"want", want}});
    }
    out_dir_ = testing::run_hf_model_oracle("model_parity", plan);
  }

  static std::shared_ptr<io::SafetensorsFile> outputs(const std::string& name) {
    return io::SafetensorsFile::open(out_dir_ / name / "outputs.safetensors");
  }
  static std::unique_ptr<CausalLM> load(const Case& c) {
    return load_hf_model(out_dir_ / c.name / "model",
                         {.dtype = c.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat});
  }
  static ForwardOptions options(const Case& c, bool fused = true) {
    return {.attn = parse_attn_impl(c.attn, "test"),
            .activation_checkpointing = false,
            .fused_kernels = fused,
            .moe = {}};
  }
  // Next-token log-probs over the packed batch (0 at each document's last token).
  static at::Tensor packed_logprobs(const CausalLM& model, const PackedBatch& batch,
                                    const ForwardOptions& opts) {
    auto docs = test_documents();
    auto [targets, valid] = testing::next_token_targets(docs, nullptr);
    auto hidden = model.forward_hidden(batch, opts);
    const auto& w = model.weights();
    auto lp = token_logprobs(hidden, model.head_weight(w[0], w[model.final_unit()]), targets,
                             {.with_entropy = false})
                  .logprobs_T;
    return at::where(valid, lp, at::zeros_like(lp));
  }

  static std::filesystem::path out_dir_;
};
std::filesystem::path ModelParity::out_dir_;

TEST_F(ModelParity, Fp32LogitsAndLogprobsMatchTransformers) {
  auto batch = PackedBatch::from_documents(test_documents());
  for (const auto& c : all_cases()) {
    if (c.dtype != "float32") continue;
    auto model = load(c);
    auto ref = outputs(c.name);
    c10::NoGradGuard no_grad;
    for (bool fused : {true, false}) {
      SCOPED_TRACE(c.name + (fused ? " (fused kernels)" : " (ATen ops)"));
      auto logits = model->forward_logits(batch, options(c, fused));
      double logits_diff = max_abs_diff(logits.to(at::kFloat), ref->tensor("logits"));
      double lp_diff =
          max_abs_diff(packed_logprobs(*model, batch, options(c, fused)), ref->tensor("logprobs"));
      std::string tag = c.name + (fused ? "_fused" : "_aten");
      RecordProperty(tag + "_logits_max_abs_diff", std::to_string(logits_diff));
      RecordProperty(tag + "_logprobs_max_abs_diff", std::to_string(lp_diff));
      // Bounds (header comment): twice one implementation's forward rounding budget, and for
      // the log-probs twice that again plus both sides' log_softmax rounding.
      const auto& w = model->weights();
      double scale = testing::tol::head_abs_scale(model->forward_hidden(batch, options(c, fused)),
                                                  model->head_weight(w[0], w[model->final_unit()]));
      double logits_tol = 2 * logits_budget(c.config, scale);
      double lp_tol = 2 * logits_tol + 2 * max_logprob_rounding(ref->tensor("logits"));
      RecordProperty(tag + "_logits_tol", std::to_string(logits_tol));
      RecordProperty(tag + "_logprobs_tol", std::to_string(lp_tol));
      EXPECT_LT(lp_tol, 1e-3) << "the bound must stay meaningful";
      EXPECT_LE(testing::tol::noted("parity_logits_fp32", logits_diff, logits_tol), logits_tol);
      EXPECT_LE(testing::tol::noted("parity_logprobs_fp32", lp_diff, lp_tol), lp_tol);
    }
  }
}

TEST_F(ModelParity, Bf16LogprobsWithinTwiceTheBf16ErrorOfTransformers) {
  auto batch = PackedBatch::from_documents(test_documents());
  for (const auto& c : all_cases()) {
    if (c.dtype != "bfloat16") continue;
    auto model = load(c);
    auto ref = outputs(c.name);
    c10::NoGradGuard no_grad;
    for (bool fused : {true, false}) {
      SCOPED_TRACE(c.name + (fused ? " (fused kernels)" : " (ATen ops)"));
      auto opts = options(c, fused);
      if (is_moe(c.config)) opts.moe = testing::recording_trace();
      auto lp = packed_logprobs(*model, batch, opts);
      // MoE: the same experts first (header comment), or the log-prob bound below is void.
      if (opts.moe) {
        ASSERT_EQ(testing::routing_mismatches(*opts.moe, *ref, c.config), 0);
      }
      auto lp_fp32 = ref->tensor("logprobs_fp32");
      double hf_error = max_abs_diff(ref->tensor("logprobs"), lp_fp32);
      double our_error = max_abs_diff(lp, lp_fp32);
      double diff = max_abs_diff(lp, ref->tensor("logprobs"));
      std::string tag = c.name + (fused ? "_fused" : "_aten");
      RecordProperty(tag + "_hf_bf16_error", std::to_string(hf_error));
      RecordProperty(tag + "_furlong_bf16_error", std::to_string(our_error));
      RecordProperty(tag + "_furlong_vs_hf_bf16", std::to_string(diff));
      EXPECT_GT(hf_error, 0.0) << "bf16 reference should differ from fp32";
      EXPECT_LE(our_error, 1.5 * hf_error);
      EXPECT_LE(diff, 2.5 * hf_error);
    }
  }
}

TEST_F(ModelParity, Fp32RoutingRecordedByFurlongEqualsTransformers) {
  auto batch = PackedBatch::from_documents(test_documents());
  int cases = 0;
  for (const auto& c : all_cases()) {
    if (c.dtype != "float32" || !is_moe(c.config)) continue;
    ++cases;
    auto model = load(c);
    auto ref = outputs(c.name);
    c10::NoGradGuard no_grad;
    // No near-tie: every margin is above 2 dz (p_(K) + p_(K+1)), dz = 2 budget(router_abs_scale)
    // (header comment).
    double dz = 2 * logits_budget(c.config, ref->tensor("router_abs_scale").item<double>());
    auto margin = testing::routing_margin(*ref, dz, c.config["num_experts_per_tok"].get<int64_t>());
    RecordProperty(c.name + "_min_routing_margin", std::to_string(margin.min_margin));
    RecordProperty(c.name + "_worst_margin_bound_over_margin", std::to_string(margin.worst));
    EXPECT_EQ(margin.near_ties, 0) << "a near-tie: pick another seed for " << c.name;
    testing::tol::noted("routing_margin_needed_over_margin", margin.worst, 1.0);
    for (bool fused : {true, false}) {
      SCOPED_TRACE(c.name + (fused ? " (fused kernels)" : " (ATen ops)"));
      auto opts = options(c, fused);
      opts.moe = testing::recording_trace();
      model->forward_hidden(batch, opts);
      EXPECT_EQ(testing::routing_mismatches(*opts.moe, *ref, c.config), 0);
      // Routing is not trivial: each sparse layer spreads the tokens over most experts.
      const auto& moe = model->config().moe;
      for (int64_t l = 0; l < model->config().num_hidden_layers; ++l) {
        if (!moe.is_sparse_layer(l)) continue;
        auto load_E = opts.moe->tokens_per_expert.at(l);
        EXPECT_EQ(load_E.sum().item<int64_t>(), batch.num_tokens() * moe.experts_per_token);
        EXPECT_GE((load_E > 0).sum().item<int64_t>(), moe.num_experts - 2) << "layer " << l;
      }
    }
  }
  EXPECT_EQ(cases, 2);
}

TEST_F(ModelParity, GradientsMatchTransformersWithAndWithoutCheckpointing) {
  auto docs = test_documents();
  auto masks = test_loss_mask(docs);
  auto batch = PackedBatch::from_documents(docs);
  auto [targets, valid] = testing::next_token_targets(docs, &masks);
  auto rows = valid.nonzero().squeeze(1);
  for (const auto& c : all_cases()) {
    if (!c.grads) continue;
    auto ref = outputs(c.name);
    for (bool checkpoint : {false, true}) {
      SCOPED_TRACE(c.name + (checkpoint ? " (activation checkpointing)" : ""));
      auto model = load(c);
      model->set_requires_grad(true);
      auto opts = options(c);
      opts.activation_checkpointing = checkpoint;
      auto hidden = model->forward_hidden(batch, opts);
      const auto& w = model->weights();
      auto lp = token_logprobs(hidden.index_select(0, rows),
                               model->head_weight(w[0], w[model->final_unit()]),
                               targets.index_select(0, rows), {.with_entropy = false});
      auto loss = -lp.logprobs_T.mean();
      loss.backward();
      // The loss is minus the mean of the masked log-probs: within the fp32 log-prob bound.
      double loss_tol =
          4 * logits_budget(c.config,
                            testing::tol::head_abs_scale(
                                hidden, model->head_weight(w[0], w[model->final_unit()]))) +
          2 * max_logprob_rounding(ref->tensor("logits"));
      EXPECT_LE(testing::tol::noted(
                    "parity_loss",
                    std::abs(loss.item<double>() - ref->tensor("loss").item<double>()), loss_tol),
                loss_tol);
      int checked = 0;
      double worst = 0;
      for (const auto& [name, tensor] : model->named_weights()) {
        auto ref_grad = ref->tensor("grad." + name);
        if (!tensor.grad().defined()) {
          // Only an expert no token was routed to gets no gradient; transformers' is then 0.
          EXPECT_NE(name.find(".mlp.experts."), std::string::npos) << name;
          EXPECT_EQ(ref_grad.abs().max().item<double>(), 0.0) << name;
          ++checked;
          continue;
        }
        double rel = (tensor.grad() - ref_grad).norm().item<double>() /
                     std::max(ref_grad.norm().item<double>(), 1e-12);
        EXPECT_LE(testing::tol::noted("parity_grad_rel", rel, 1e-4), 1e-4) << name;
        worst = std::max(worst, rel);
        ++checked;
      }
      EXPECT_EQ(checked, static_cast<int>(model->named_weights().size()));
      RecordProperty(c.name + (checkpoint ? "_ckpt" : "") + "_worst_grad_rel_err",
                     std::to_string(worst));
    }
  }
}

TEST_F(ModelParity, PackedRowsEqualEachDocumentAlone) {
  auto docs = test_documents();
  auto packed = PackedBatch::from_documents(docs);
  for (const auto& c : all_cases()) {
    SCOPED_TRACE(c.name);
    auto model = load(c);
    c10::NoGradGuard no_grad;
    auto packed_logits = model->forward_logits(packed, options(c)).to(at::kFloat);
    int64_t offset = 0;
    for (const auto& doc : docs) {
      auto alone = model->forward_logits(PackedBatch::from_documents({doc}), options(c));
      auto slice = packed_logits.narrow(0, offset, static_cast<int64_t>(doc.size()));
      // The same code computing the same exact values, only the GEMM blocking (row count)
      // differs. fp32: each is within the forward budget of the exact logits, so twice that.
      // bf16: GEMMs accumulate in fp32 and round once to bf16; an fp32-level difference flips a
      // rounding only rarely, by one bf16 ulp (2u |z|); allow two ulps of the largest logit.
      double tol;
      if (c.dtype == "float32") {
        const auto& w = model->weights();
        tol = 2 * logits_budget(c.config, testing::tol::head_abs_scale(
                                              model->forward_hidden(packed, options(c)),
                                              model->head_weight(w[0], w[model->final_unit()])));
      } else {
        tol = 4 * testing::tol::kUBf16 * packed_logits.abs().max().item<double>();
      }
      EXPECT_LE(
          testing::tol::noted("packed_vs_alone", max_abs_diff(slice, alone.to(at::kFloat)), tol),
          tol);
      offset += static_cast<int64_t>(doc.size());
    }
  }
}

}  // namespace
}  // namespace furlong::models
