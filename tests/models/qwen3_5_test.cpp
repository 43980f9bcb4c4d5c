// Qwen3.5 (Qwen3_5ForCausalLM, hybrid Gated DeltaNet + gated softmax attention) against HF
// transformers' own code (its pure-torch fallbacks: torch_chunk_gated_delta_rule and
// causal_conv1d_fn), on tiny random models written by scripts/oracles/hf_model_oracle.py. The
// oracle runs each document alone (transformers does not reset the DeltaNet state at a packed
// row's position resets); furlong runs the documents packed, so each comparison is also the
// packing property: a packed batch equals its documents run one by one.
//
// Tolerances (the forward budget of tests/common/tolerances.h, docs/testing.md):
//  * A DeltaNet layer has more reductions than a softmax one. Per layer, in order: the input
//    norm (D terms), the four in-projections (D), the conv (W), the q/k L2 norms (dk), within a
//    chunk k_beta k^T and q k^T (dk), the unit-triangular solves (C = 64 terms), the state
//    reads k_cumdecay S and q S (dk), intra-chunk attention times v_new (C), the state update
//    k^T v_new (C per chunk, summed over the T/C chunks: T), the gated norm (dv), out_proj
//    (Hv dv), the post norm (D) and the MLP (D, F): 16. The solves do not amplify errors: their
//    matrix is I + strictly-lower(beta k k^T decay), whose inverse applies products of
//    (I - beta k k^T) exp(g), contractions for unit k, beta in (0, 1) and g <= 0. So the fp32
//    budget of one implementation is gamma_prob(16 L + 2) k_max) times the logits' absolute
//    scale, with k_max the longest of D, F, 2 N H, Hv dv, C and the longest document; furlong
//    vs transformers is twice that (through the exact value).
//  * Qwen3.5-MoE: the sparse MLP replaces the dense one's 2 reductions by the router (D), its
//    softmax (E), the top-k renormalization (K), each expert's SwiGLU (D, F), the shared
//    expert (D, F) and its gate (D), and the combine (K + 1): 9, so 23 per layer. Routing is
//    compared first, token for token, and the seed must leave no fp32 near-tie (the margin
//    argument of model_parity_test.cpp, tests/common/hf_oracle.h: routing_margin).
//    Its gradients go through the router's softmax and the renormalized top-k weights, whose
//    conditioning (sum |terms| / |sum|) the dense argument below does not cover; they are held
//    to accuracy instead: furlong's error against the float64 gradient (the oracle runs the
//    model in float64) is at most twice transformers' own fp32 error over all gradients
//    together, and four times it per parameter (a parameter of a few numbers, such as a
//    layer's dt_bias, is a small sample of the rounding), plus 10 u for gradients both compute
//    almost exactly.
//  * fp32 log-probs and gradients as in model_parity_test.cpp (same arguments): log-probs
//    within twice the logit bound plus both sides' log_softmax rounding; gradients norm-wise
//    within 1e-4.
//  * bf16: furlong's error against the fp32 model is at most 1.5x transformers' own bf16 error,
//    and furlong vs transformers at most 2.5x (triangle inequality).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "common/hf_oracle.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "io/safetensors.h"
#include "models/gated_delta_net.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
#include "models/registry.h"

namespace furlong::models {
namespace {

using testing::max_abs_diff;

struct Case {
  std::string name;
  Json config;
  std::string dtype = "float32";
  int seed = 0;
};

Json tiny_qwen3_5(const Json& overrides = Json::object()) {
  return testing::tiny_qwen3_5_config(overrides);
}

std::vector<Case> all_cases() {
  return {
      {"qwen3_5_default_pattern", tiny_qwen3_5(), "float32", 21},
      // Full attention first and last, equal q/k and value heads, conv 3, half the head turned,
      // tied embeddings.
      {"qwen3_5_pattern_tied",
       tiny_qwen3_5(
           {{"layer_types",
             {"full_attention", "linear_attention", "linear_attention", "full_attention"}},
            {"linear_num_value_heads", 2},
            {"linear_conv_kernel_dim", 3},
            {"rope_parameters",
             {{"rope_type", "default"}, {"rope_theta", 1000.0}, {"partial_rotary_factor", 0.5}}},
            {"tie_word_embeddings", true}}),
       "float32", 22},
      {"qwen3_5_bf16", tiny_qwen3_5(), "bfloat16", 23},
      {"qwen3_5_moe", testing::tiny_qwen3_5_moe_config(), "float32", 32},
      // The multimodal checkpoint: furlong runs its text model, as transformers'
      // AutoModelForCausalLM does.
      {"qwen3_5_multimodal", testing::tiny_qwen3_5_multimodal_config(tiny_qwen3_5()), "float32",
       34},
  };
}

// The text model's config (a multimodal one's text_config).
const Json& text_of(const Json& c) {
  return c.contains("text_config") ? c["text_config"] : c;
}

bool is_moe(const Json& c) {
  return text_of(c).contains("num_experts");
}

// Three documents, one longer than a 64-token chunk (the state crosses a chunk boundary).
std::vector<std::vector<int64_t>> test_documents() {
  std::mt19937 rng(4321);
  std::uniform_int_distribution<int64_t> token(0, 96);
  std::vector<std::vector<int64_t>> docs;
  for (int len : {9, 70, 6}) {
    std::vector<int64_t> doc(len);
    for (auto& t : doc) t = token(rng);
    docs.push_back(doc);
  }
  return docs;
}

double k_max(const Json& config) {
  const Json& c = text_of(config);
  size_t longest = 0;
  for (const auto& d : test_documents()) longest = std::max(longest, d.size());
  return static_cast<double>(std::max<int64_t>(
      {c["hidden_size"].get<int64_t>(), c.value("intermediate_size", int64_t{0}),
       2 * c["num_attention_heads"].get<int64_t>() * c["head_dim"].get<int64_t>(),
       c["linear_num_value_heads"].get<int64_t>() * c["linear_value_head_dim"].get<int64_t>(),
       int64_t{64}, static_cast<int64_t>(longest),
       c.value("shared_expert_intermediate_size", int64_t{0}),
       c.value("num_experts", int64_t{0})}));
}

// One implementation's fp32 rounding budget per logit (header comment).
double logits_budget(const Json& c, double abs_scale) {
  const double reductions =
      (is_moe(c) ? 23.0 : 16.0) * text_of(c)["num_hidden_layers"].get<double>() + 2;
  return testing::tol::gamma_prob(reductions * k_max(c), testing::tol::kUFp32) * abs_scale;
}

class Qwen35Parity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto docs = test_documents();
    Json plan = Json::array();
    for (const auto& c : all_cases()) {
      Json want = Json::array({"logits", "logprobs"});
      want.push_back(c.dtype == "float32" ? "grads" : "fp32_reference");
      if (is_moe(c.config)) want.insert(want.end(), {"routing", "grads_fp64"});
      plan.push_back({{"name", c.name},
                      {"mode", "create"},
                      {"config", c.config},
                      {"seed", c.seed},
                      {"dtype", c.dtype},
                      {"attn", "eager"},
                      {"perturb", true},
                      {"documents", docs},
                      {"separate_documents", true},
                      {"want", want}});
    }
    out_dir_ = testing::run_hf_model_oracle("qwen3_5_parity", plan);
  }
  static std::shared_ptr<io::SafetensorsFile> outputs(const std::string& name) {
    return io::SafetensorsFile::open(out_dir_ / name / "outputs.safetensors");
  }
  static std::unique_ptr<CausalLM> load(const Case& c) {
    return load_hf_model(out_dir_ / c.name / "model",
                         {.dtype = c.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat});
  }
  static ForwardOptions options(bool fused, bool checkpoint = false) {
    return {.attn = AttnImpl::kEager,
            .activation_checkpointing = checkpoint,
            .fused_kernels = fused,
            .moe = {}};
  }
  static at::Tensor next_logprobs(const CausalLM& model, const at::Tensor& hidden_PD) {
    auto [targets, valid] = testing::next_token_targets(test_documents());
    const auto& w = model.weights();
    auto lp = token_logprobs(hidden_PD, model.head_weight(w[0], w[model.final_unit()]), targets,
                             {.with_entropy = false})
                  .logprobs_T;
    return at::where(valid, lp, at::zeros_like(lp));
  }
  static std::filesystem::path out_dir_;
};
std::filesystem::path Qwen35Parity::out_dir_;

TEST_F(Qwen35Parity, PackedFp32LogitsAndLogprobsEqualTransformersPerDocument) {
  auto batch = PackedBatch::from_documents(test_documents());
  for (const auto& c : all_cases()) {
    if (c.dtype != "float32") continue;
    auto model = load(c);
    auto ref = outputs(c.name);
    c10::NoGradGuard no_grad;
    for (bool fused : {true, false}) {
      SCOPED_TRACE(c.name + (fused ? " (fused kernels)" : " (ATen ops)"));
      auto opts = options(fused);
      if (is_moe(c.config)) opts.moe = testing::recording_trace();
      auto hidden = model->forward_hidden(batch, opts);
      if (opts.moe) {
        ASSERT_EQ(testing::routing_mismatches(*opts.moe, *ref, c.config), 0);
      }
      const auto& w = model->weights();
      const auto& head = model->head_weight(w[0], w[model->final_unit()]);
      auto logits = at::linear(hidden, head);
      const double logits_tol =
          2 * logits_budget(c.config, testing::tol::head_abs_scale(hidden, head));
      const double lp_tol = 2 * logits_tol + 2 * testing::max_logprob_rounding(
                                                     ref->tensor("logits"), test_documents());
      // Meaningful: a wrong mixer (no state reset, no gate, full rotary) moves these log-probs
      // by 1e-2 and more.
      EXPECT_LT(lp_tol, 5e-3) << "the bound must stay meaningful";
      const double logits_diff = max_abs_diff(logits, ref->tensor("logits"));
      const double lp_diff = max_abs_diff(next_logprobs(*model, hidden), ref->tensor("logprobs"));
      RecordProperty(c.name + "_logits_max_abs_diff", std::to_string(logits_diff));
      EXPECT_LE(testing::tol::noted("qwen3_5_logits_fp32", logits_diff, logits_tol), logits_tol);
      EXPECT_LE(testing::tol::noted("qwen3_5_logprobs_fp32", lp_diff, lp_tol), lp_tol);
    }
  }
}

TEST_F(Qwen35Parity, Bf16LogprobsWithinTwiceTheBf16ErrorOfTransformers) {
  auto batch = PackedBatch::from_documents(test_documents());
  for (const auto& c : all_cases()) {
    if (c.dtype != "bfloat16") continue;
    auto model = load(c);
    auto ref = outputs(c.name);
    c10::NoGradGuard no_grad;
    auto lp = next_logprobs(*model, model->forward_hidden(batch, options(true)));
    auto lp_fp32 = ref->tensor("logprobs_fp32");
    const double hf_error = max_abs_diff(ref->tensor("logprobs"), lp_fp32);
    EXPECT_GT(hf_error, 0.0) << "bf16 reference should differ from fp32";
    EXPECT_LE(max_abs_diff(lp, lp_fp32), 1.5 * hf_error);
    EXPECT_LE(max_abs_diff(lp, ref->tensor("logprobs")), 2.5 * hf_error);
  }
}

TEST_F(Qwen35Parity, GradientsEqualTransformersWithAndWithoutCheckpointing) {
  auto docs = test_documents();
  auto batch = PackedBatch::from_documents(docs);
  auto [targets, valid] = testing::next_token_targets(docs);
  auto rows = valid.nonzero().squeeze(1);
  for (const auto& c : all_cases()) {
    if (c.dtype != "float32") continue;
    auto ref = outputs(c.name);
    for (bool checkpoint : {false, true}) {
      SCOPED_TRACE(c.name + (checkpoint ? " (activation checkpointing)" : ""));
      auto model = load(c);
      model->set_requires_grad(true);
      auto hidden = model->forward_hidden(batch, options(true, checkpoint));
      const auto& w = model->weights();
      auto lp = token_logprobs(hidden.index_select(0, rows),
                               model->head_weight(w[0], w[model->final_unit()]),
                               targets.index_select(0, rows), {.with_entropy = false});
      (-lp.logprobs_T.mean()).backward();
      int checked = 0;
      auto rel_to = [](const at::Tensor& g, const at::Tensor& exact) {
        return (g - exact).norm().item<double>() / std::max(exact.norm().item<double>(), 1e-12);
      };
      std::vector<at::Tensor> ours_all, theirs_all, exact_all;
      for (const auto& [name, tensor] : model->named_weights()) {
        ASSERT_TRUE(tensor.grad().defined()) << name;
        auto ref_grad = ref->tensor("grad." + name);
        const double rel = rel_to(tensor.grad(), ref_grad);
        ++checked;
        if (!is_moe(c.config)) {
          EXPECT_LE(testing::tol::noted("qwen3_5_grad_rel", rel, 1e-4), 1e-4) << name;
          continue;
        }
        // MoE: as accurate as transformers against the float64 gradient (header comment).
        auto exact = ref->tensor("grad64." + name);
        const double ours = rel_to(tensor.grad(), exact), theirs = rel_to(ref_grad, exact);
        const double bound = 4 * theirs + 10 * testing::tol::kUFp32;
        EXPECT_LE(testing::tol::noted("qwen3_5_moe_grad_error_over_hf", ours, bound), bound)
            << name << ": transformers' own fp32 error " << theirs;
        EXPECT_LT(rel, 1e-3) << name;
        ours_all.push_back(tensor.grad().reshape(-1));
        theirs_all.push_back(ref_grad.reshape(-1));
        exact_all.push_back(exact.reshape(-1));
      }
      if (!ours_all.empty()) {
        auto exact = at::cat(exact_all);
        const double ours = rel_to(at::cat(ours_all), exact);
        const double theirs = rel_to(at::cat(theirs_all), exact);
        EXPECT_LE(ours, 2 * theirs + 10 * testing::tol::kUFp32)
            << "all gradients: transformers' own fp32 error " << theirs;
      }
      EXPECT_EQ(checked, static_cast<int>(model->named_weights().size()));
    }
  }
}

// Qwen3.5-MoE: no fp32 near-tie for this seed (so routing must agree), and every layer spreads
// the tokens over most experts (so the comparison above is not trivial).
TEST_F(Qwen35Parity, MoeRoutingHasNoNearTieAndUsesMostExperts) {
  int cases = 0;
  for (const auto& c : all_cases()) {
    if (!is_moe(c.config)) continue;
    ++cases;
    auto ref = outputs(c.name);
    const double dz = 2 * logits_budget(c.config, ref->tensor("router_abs_scale").item<double>());
    const int64_t K = c.config["num_experts_per_tok"].get<int64_t>();
    auto margin = testing::routing_margin(*ref, dz, K);
    EXPECT_EQ(margin.near_ties, 0) << "a near-tie: pick another seed for " << c.name << " (worst "
                                   << margin.worst << ", min margin " << margin.min_margin << ")";
    testing::tol::noted("qwen3_5_routing_margin_needed_over_margin", margin.worst, 1.0);
    auto model = load(c);
    c10::NoGradGuard no_grad;
    auto opts = options(true);
    opts.moe = testing::recording_trace();
    auto batch = PackedBatch::from_documents(test_documents());
    model->forward_hidden(batch, opts);
    for (int64_t l = 0; l < c.config["num_hidden_layers"].get<int64_t>(); ++l) {
      auto load_E = opts.moe->tokens_per_expert.at(static_cast<size_t>(l));
      EXPECT_EQ(load_E.sum().item<int64_t>(), batch.num_tokens() * K);
      EXPECT_GE((load_E > 0).sum().item<int64_t>(), c.config["num_experts"].get<int64_t>() - 2)
          << "layer " << l;
    }
  }
  EXPECT_EQ(cases, 1);
}

// The chunked rule (whole sequences, state carried over chunks) equals the recurrent rule (one
// token at a time) on random inputs, outputs and final states: the same recurrence, with the
// chunked form's extra reductions (solves over C, sums over dk) under the fp32 budget of
// gamma_prob(8 * max(C, T, dk)) relative to the outputs' scale (both are contractions of
// unit-norm keys, so the state stays bounded by the sum of |v|).
TEST(GatedDeltaRule, ChunkedEqualsRecurrentAndCarriesTheStateAcrossChunks) {
  at::manual_seed(5);
  const int64_t B = 2, T = 150, Hk = 2, Hv = 4, dk = 8, dv = 6;
  auto q = at::randn({B, T, Hk, dk}), k = at::randn({B, T, Hk, dk}), v = at::randn({B, T, Hv, dv});
  auto g = -at::rand({B, T, Hv}) * 0.5, beta = at::rand({B, T, Hv});
  auto s0 = at::randn({B, Hv, dk, dv}) * 0.1;
  auto chunked = chunk_gated_delta_rule(q, k, v, g, beta, s0, 32);
  auto recurrent = recurrent_gated_delta_rule(q, k, v, g, beta, s0);
  const double scale = v.abs().sum(1).max().item<double>() + s0.abs().max().item<double>();
  const double tol = testing::tol::gamma_prob(8.0 * T, testing::tol::kUFp32) * scale;
  EXPECT_LE(max_abs_diff(chunked.o_BTHV, recurrent.o_BTHV), tol);
  EXPECT_LE(max_abs_diff(chunked.state_BHKV, recurrent.state_BHKV), tol);
  // Two halves with the state handed over equal the whole.
  auto first = chunk_gated_delta_rule(q.slice(1, 0, 70), k.slice(1, 0, 70), v.slice(1, 0, 70),
                                      g.slice(1, 0, 70), beta.slice(1, 0, 70), s0, 32);
  auto second = chunk_gated_delta_rule(q.slice(1, 70), k.slice(1, 70), v.slice(1, 70),
                                       g.slice(1, 70), beta.slice(1, 70), first.state_BHKV, 32);
  EXPECT_LE(max_abs_diff(at::cat({first.o_BTHV, second.o_BTHV}, 1), recurrent.o_BTHV), tol);
}

// The engine's fused decode step (read a state, write the next one into another buffer) equals
// the elementwise recurrent rule. Both compute the same products in the same order; only the
// sums over d_k (S^T k, S'^T q) may run in another order, so each output and state differs by at
// most 2 gamma_prob(dk + 2) times the sum of the absolute terms, <= dk (max|S| + max|v|) for
// unit q, k and beta, decay <= 1.
TEST(GatedDeltaRule, FusedDecodeStepEqualsTheRecurrentRule) {
  at::manual_seed(7);
  const int64_t B = 3, Hk = 2, Hv = 4, dk = 16, dv = 12;
  auto q = at::randn({B, 1, Hk, dk}), k = at::randn({B, 1, Hk, dk}), v = at::randn({B, 1, Hv, dv});
  auto g = -at::rand({B, 1, Hv}), beta = at::rand({B, 1, Hv});
  auto s0 = at::randn({B, Hv, dk, dv});
  std::vector<at::Tensor> from, to;
  for (int64_t b = 0; b < B; ++b) {
    from.push_back(s0[b].clone());
    to.push_back(at::full({Hv, dk, dv}, 7.0f));  // overwritten entirely
  }
  auto o = gated_delta_decode_into(q, k, v, g, beta, from, to);
  auto ref = recurrent_gated_delta_rule(q, k, v, g, beta, s0);
  const double scale = dk * (s0.abs().max().item<double>() + v.abs().max().item<double>());
  const double tol = 2 * testing::tol::gamma_prob(dk + 2.0, testing::tol::kUFp32) * scale;
  EXPECT_LE(max_abs_diff(o, ref.o_BTHV), tol);
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_LE(max_abs_diff(to[b], ref.state_BHKV[b]), tol) << "document " << b;
    EXPECT_TRUE(at::equal(from[b], s0[b])) << "the state read must stay as it was";
  }
  // Zero decay and beta (a padded document) pass the state through unchanged, bit for bit.
  auto o2 = gated_delta_decode_into(q, k, v, at::zeros_like(g), at::zeros_like(beta), from, to);
  for (int64_t b = 0; b < B; ++b) EXPECT_TRUE(at::equal(to[b], from[b]));
}

// The conv with a carried window equals the conv over the whole sequence.
TEST(GatedDeltaRule, CausalConvWithAWindowContinuesTheSequence) {
  at::manual_seed(6);
  const int64_t W = 4, C = 10;
  auto x = at::randn({1, 20, C}), w = at::randn({C, 1, W});
  auto whole = causal_conv1d_silu(x, w);
  auto window = x.slice(1, 12 - (W - 1), 12).transpose(1, 2);
  auto rest = causal_conv1d_silu(x.slice(1, 12), w, window);
  EXPECT_LE(max_abs_diff(rest, whole.slice(1, 12)), 1e-5);
}

// A document's hidden states are the same bits whatever else is packed with it (the engine's
// exact log-probs, scored with other finished requests, then equal the trainer's, which packs
// other micro-batches): fp32, fused kernels, as both run it.
TEST_F(Qwen35Parity, ADocumentScoresBitForBitAloneOrPacked) {
  auto model = load(all_cases()[0]);
  c10::NoGradGuard no_grad;
  auto docs = test_documents();
  auto alone = model->forward_hidden(PackedBatch::from_documents({docs[1]}), options(true));
  auto packed = model->forward_hidden(PackedBatch::from_documents({docs[0], docs[1], docs[2]}),
                                      options(true));
  const auto n = static_cast<int64_t>(docs[1].size()), start = static_cast<int64_t>(docs[0].size());
  EXPECT_TRUE(at::equal(alone, packed.narrow(0, start, n)))
      << "max |diff| " << max_abs_diff(alone, packed.narrow(0, start, n));
  // 64 short documents in one batch, and in 4 batches of 16.
  std::mt19937 rng(9);
  std::uniform_int_distribution<int64_t> token(0, 96), length(3, 9);
  std::vector<std::vector<int64_t>> many(64);
  for (auto& d : many) {
    d.resize(static_cast<size_t>(length(rng)));
    for (auto& t : d) t = token(rng);
  }
  auto sdpa = options(true);
  sdpa.attn = AttnImpl::kSdpa;
  auto all = model->forward_hidden(PackedBatch::from_documents(many), sdpa);
  std::vector<at::Tensor> parts;
  for (size_t g = 0; g < 4; ++g) {
    std::vector<std::vector<int64_t>> group(many.begin() + 16 * g, many.begin() + 16 * (g + 1));
    parts.push_back(model->forward_hidden(PackedBatch::from_documents(group), sdpa));
  }
  auto grouped = at::cat(parts);
  EXPECT_TRUE(at::equal(all, grouped)) << "max |diff| " << max_abs_diff(all, grouped);
}

// The trainer scores with autograd on (old log-probs of the step it trains on), the engine in
// inference mode: the same bits.
TEST_F(Qwen35Parity, GradModeDoesNotChangeTheForward) {
  auto model = load(all_cases()[0]);
  auto batch = PackedBatch::from_documents(test_documents());
  at::Tensor without;
  {
    c10::InferenceMode guard;
    without = model->forward_hidden(batch, options(true));
  }
  model->set_requires_grad(true);
  auto with = model->forward_hidden(batch, options(true)).detach();
  EXPECT_TRUE(at::equal(with, without)) << "max |diff| " << max_abs_diff(with, without);
}

TEST(Qwen35Config, BadFieldsNameThemselves) {
  auto bad_type = tiny_qwen3_5(
      {{"layer_types", {"linear_attention", "sliding", "linear_attention", "full_attention"}}});
  auto msg = testing::error_of([&] { create_model(bad_type, "cfg.json"); });
  EXPECT_NE(msg.find("layer_types[1] is 'sliding'"), std::string::npos) << msg;
  auto short_types = tiny_qwen3_5({{"layer_types", {"full_attention"}}});
  msg = testing::error_of([&] { create_model(short_types, "cfg.json"); });
  EXPECT_NE(msg.find("'layer_types' has 1 entries for num_hidden_layers 4"), std::string::npos)
      << msg;
  auto heads = tiny_qwen3_5({{"linear_num_value_heads", 3}});
  msg = testing::error_of([&] { create_model(heads, "cfg.json"); });
  EXPECT_NE(msg.find("linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2"),
            std::string::npos)
      << msg;
  Json multimodal{{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                  {"model_type", "qwen3_5"}};
  msg = testing::error_of([&] { create_model(multimodal, "cfg.json"); });
  EXPECT_NE(msg.find("needs field 'text_config'"), std::string::npos) << msg;
  // A multimodal config is its text model, named as such in errors; its tensors live under
  // model.language_model.*, and its top-level tie_word_embeddings is the one that applies.
  auto text = testing::tiny_qwen3_5_moe_config({{"tie_word_embeddings", false}});
  auto moe_multimodal = testing::tiny_qwen3_5_multimodal_config(text);
  moe_multimodal["tie_word_embeddings"] = true;
  auto mm = create_model(moe_multimodal, "cfg.json");
  EXPECT_EQ(mm->config().architecture, "Qwen3_5MoeForConditionalGeneration");
  EXPECT_EQ(mm->config().checkpoint_text_prefix, "model.language_model.");
  EXPECT_TRUE(mm->config().tie_word_embeddings);
  EXPECT_EQ(mm->config().moe.num_experts, 8);
  moe_multimodal["text_config"]["num_experts_per_tok"] = 9;
  msg = testing::error_of([&] { create_model(moe_multimodal, "cfg.json"); });
  EXPECT_NE(msg.find("cfg.json (text_config): field 'num_experts_per_tok'"), std::string::npos)
      << msg;
  msg = testing::error_of([&] {
    create_model(testing::tiny_qwen3_5_moe_config({{"shared_expert_intermediate_size", 0}}),
                 "cfg.json");
  });
  EXPECT_NE(msg.find("'shared_expert_intermediate_size' must be positive"), std::string::npos)
      << msg;
  msg = testing::error_of([&] {
    create_model(testing::tiny_qwen3_5_moe_config({{"num_experts_per_tok", 9}}), "cfg.json");
  });
  EXPECT_NE(msg.find("'num_experts_per_tok' must be in [1, num_experts = 8]"), std::string::npos)
      << msg;
  // Every layer of Qwen3.5-MoE is sparse, with normalized top-k weights, as in transformers.
  auto moe = create_model(testing::tiny_qwen3_5_moe_config({{"mlp_only_layers", {1}}}), "c");
  EXPECT_EQ(moe->config().moe.num_sparse_layers(4), 4);
  EXPECT_TRUE(moe->config().moe.norm_topk_prob);
  // Partial rotary is the architecture's: 0.25 when absent, and refused for Qwen3.
  auto model = create_model(tiny_qwen3_5(), "cfg.json");
  EXPECT_EQ(model->config().rope.partial_rotary_factor, 0.25);
  EXPECT_EQ(model->config().linear_attention.layers, (std::vector<int64_t>{0, 1, 2}));
}

}  // namespace
}  // namespace furlong::models
