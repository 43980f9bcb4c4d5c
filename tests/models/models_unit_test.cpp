// Unit tests for src/models that need no oracle: construction on the meta device, config
// validation messages, rope config spellings, activation checkpointing, the fused log-prob
// kernel against plain autograd, initialization, and checkpoint loading errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <map>

#include "common/random_models.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
#include "models/registry.h"

namespace furlong::models {
namespace {

using testing::TinyFamily;

// The architecture alone names the model (no model_type); tie_word_embeddings is left to its
// default.
Json small_config(TinyFamily family = TinyFamily::kQwen3) {
  return testing::tiny_model_config(family, {{"model_type", nullptr},
                                             {"vocab_size", 50},
                                             {"hidden_size", 32},
                                             {"intermediate_size", 48},
                                             {"head_dim", 8},
                                             {"tie_word_embeddings", nullptr},
                                             {"initializer_range", 0.2}});
}

using testing::error_of;

std::unique_ptr<CausalLM> random_model(const Json& cfg, uint64_t seed = 0) {
  return furlong::testing::random_model(cfg, seed);
}

TEST(Models, ConstructOnMetaDeviceAllocatesNothing) {
  for (auto family : {TinyFamily::kQwen3, TinyFamily::kQwen2, TinyFamily::kLlama}) {
    auto model = create_model(small_config(family), "cfg");
    EXPECT_FALSE(model->materialized());
    model->materialize(at::TensorOptions().device(at::kMeta).dtype(at::kBFloat16));
    for (const auto& [name, t] : model->named_weights()) {
      EXPECT_TRUE(t.is_meta()) << name;
    }
    EXPECT_EQ(model->units().size(), 2u + 2u);  // embed, 2 blocks, final
  }
}

// Qwen3-MoE: decoder_sparse_step and mlp_only_layers decide which blocks are sparse; a sparse
// block's unit holds the router and every expert's three projections under HF's on-disk names.
TEST(Models, MoeLayersAndTheirPerExpertParameters) {
  auto cfg = testing::as_qwen3_moe(small_config(), {{"num_hidden_layers", 4},
                                                    {"num_experts", 3},
                                                    {"moe_intermediate_size", 5},
                                                    {"norm_topk_prob", nullptr},
                                                    {"decoder_sparse_step", 2},
                                                    {"mlp_only_layers", {3}}});
  auto model = create_model(cfg, "cfg");
  const auto& c = model->config();
  ASSERT_EQ(model->units().size(), 1u + 4u + 1u);
  int64_t D = c.hidden_size;
  for (int64_t l = 0; l < 4; ++l) {
    SCOPED_TRACE(l);
    EXPECT_EQ(c.moe.is_sparse_layer(l), l == 1);  // (l + 1) % 2 == 0 and not in mlp_only_layers
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& p : model->units()[1 + l].params) shapes[p.name] = p.shape;
    std::string mlp = "model.layers." + std::to_string(l) + ".mlp.";
    if (l != 1) {
      EXPECT_TRUE(shapes.contains(mlp + "gate_proj.weight"));
      EXPECT_FALSE(shapes.contains(mlp + "gate.weight"));
      continue;
    }
    EXPECT_FALSE(shapes.contains(mlp + "gate_proj.weight"));
    EXPECT_EQ(shapes[mlp + "gate.weight"], (std::vector<int64_t>{3, D}));
    for (int e = 0; e < 3; ++e) {
      std::string ex = mlp + "experts." + std::to_string(e) + ".";
      EXPECT_EQ(shapes[ex + "gate_proj.weight"], (std::vector<int64_t>{5, D}));
      EXPECT_EQ(shapes[ex + "up_proj.weight"], (std::vector<int64_t>{5, D}));
      EXPECT_EQ(shapes[ex + "down_proj.weight"], (std::vector<int64_t>{D, 5}));
    }
    EXPECT_FALSE(shapes.contains(mlp + "experts.3.gate_proj.weight"));
  }
  EXPECT_EQ(c.moe.num_sparse_layers(4), 1);
}

TEST(Models, ParameterLayoutFollowsArchitecture) {
  auto qwen3 = create_model(small_config(TinyFamily::kQwen3), "cfg");
  auto qwen2 = create_model(small_config(TinyFamily::kQwen2), "cfg");
  auto names = [](const CausalLM& m) {
    std::set<std::string> out;
    for (const auto& u : m.units())
      for (const auto& p : u.params) out.insert(p.name);
    return out;
  };
  EXPECT_TRUE(names(*qwen3).count("model.layers.1.self_attn.q_norm.weight"));
  EXPECT_FALSE(names(*qwen3).count("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_TRUE(names(*qwen2).count("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(names(*qwen2).count("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_TRUE(names(*qwen3).count("lm_head.weight"));
  auto tied_cfg = small_config();
  tied_cfg["tie_word_embeddings"] = true;
  EXPECT_FALSE(names(*create_model(tied_cfg, "cfg")).count("lm_head.weight"));
  // Qwen3 q_proj is [N*H, D] with the explicit head_dim.
  auto [u, i] = qwen3->locate("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(qwen3->units()[u].params[i].shape, (std::vector<int64_t>{32, 32}));
}

TEST(Models, ConfigErrorsNameTheFileAndField) {
  auto cfg = small_config();
  cfg["architectures"] = {"Qwen3ForCausalLn"};
  auto msg = error_of([&] { create_model(cfg, "m/config.json"); });
  EXPECT_NE(msg.find("m/config.json: unsupported architecture 'Qwen3ForCausalLn'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("did you mean Qwen3ForCausalLM"), std::string::npos) << msg;

  cfg = small_config();
  cfg["num_key_value_heads"] = 3;
  msg = error_of([&] { create_model(cfg, "c.json"); });
  EXPECT_NE(msg.find("must be a multiple of num_key_value_heads (3)"), std::string::npos) << msg;

  cfg = small_config();
  cfg["hidden_size"] = "32";
  msg = error_of([&] { create_model(cfg, "c.json"); });
  EXPECT_NE(msg.find("c.json: field 'hidden_size' must be an integer"), std::string::npos) << msg;

  cfg = small_config();
  cfg["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  msg = error_of([&] { create_model(cfg, "c.json"); });
  EXPECT_NE(msg.find("unsupported rope_type 'longrope'"), std::string::npos) << msg;

  cfg = small_config();
  cfg["hidden_act"] = "gelu";
  msg = error_of([&] { create_model(cfg, "c.json"); });
  EXPECT_NE(msg.find("hidden_act 'gelu' is not supported"), std::string::npos) << msg;
}

// eos_token_id: an id or a list of ids; pad_token_id: an id or null. Anything else names the field.
TEST(Models, SpecialTokenFieldsMustBeTokenIds) {
  struct Case {
    const char* field;
    Json value;
    const char* expected;
  };
  for (const Case& c : {Case{"eos_token_id", true,
                             "'eos_token_id' must be an integer token id or "
                             "a list of them, got boolean true"},
                        Case{"eos_token_id", {1, "2"}, "'eos_token_id' must be an integer"},
                        Case{"pad_token_id", Json::array(),
                             "'pad_token_id' must be an integer "
                             "token id or null, got array []"}}) {
    auto cfg = small_config();
    cfg[c.field] = c.value;
    auto msg = error_of([&] { create_model(cfg, "c.json"); });
    EXPECT_NE(msg.find(std::string("c.json: field ") + c.expected), std::string::npos) << msg;
  }
  for (const Json& eos : {Json(2), Json({1, 2}), Json(nullptr)}) {
    auto cfg = small_config();
    cfg["eos_token_id"] = eos;
    cfg["pad_token_id"] = eos.is_array() ? Json(nullptr) : eos;
    EXPECT_NO_THROW(create_model(cfg, "c.json")) << eos.dump();
  }
}

TEST(Models, OldAndNewRopeSpellingsAgree) {
  auto old_style = small_config(TinyFamily::kLlama);
  old_style["rope_theta"] = 500000.0;
  old_style["rope_scaling"] = {{"type", "llama3"},
                               {"factor", 8.0},
                               {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 16}};
  auto new_style = small_config(TinyFamily::kLlama);
  new_style["rope_parameters"] = {
      {"rope_type", "llama3"},   {"rope_theta", 500000.0},
      {"factor", 8.0},           {"low_freq_factor", 1.0},
      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
  auto a = create_model(old_style, "old")->config();
  auto b = create_model(new_style, "new")->config();
  auto ra = RotaryEmbedding::create(a), rb = RotaryEmbedding::create(b);
  EXPECT_TRUE(at::equal(ra.inv_freq, rb.inv_freq));
  auto plain =
      RotaryEmbedding::create(create_model(small_config(TinyFamily::kLlama), "p")->config());
  EXPECT_FALSE(at::equal(ra.inv_freq, plain.inv_freq));
}

TEST(Models, ActivationCheckpointingGivesIdenticalGradients) {
  auto batch = PackedBatch::from_documents({{1, 5, 7, 9, 2}, {3, 3, 8}});
  std::vector<at::Tensor> grads[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    auto model = random_model(small_config(), 7);
    model->set_requires_grad(true);
    auto logits = model->forward_logits(batch, {.activation_checkpointing = ckpt == 1, .moe = {}});
    at::log_softmax(logits, -1).select(1, 4).sum().backward();
    for (const auto& [name, t] : model->named_weights()) grads[ckpt].push_back(t.grad());
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  // Recomputation runs the same kernels on the same shapes, so the values are bitwise equal;
  // atol 1e-7 (~u of these O(1) gradients) only allows a weight's gradient contributions to be
  // accumulated in another order (at most one rounding apart).
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_TRUE(at::allclose(grads[0][i], grads[1][i], 0, 1e-7)) << i;
  }
}

class FusedLogprobs : public ::testing::TestWithParam<c10::ScalarType> {};

// kDouble runs the ATen path, kFloat the CPU kernel; both against a float64 autograd reference,
// for one row per chunk or one chunk, logits recomputed in backward or kept from forward.
TEST_P(FusedLogprobs, MatchPlainAutogradIncludingEntropyAndTemperature) {
  at::manual_seed(3);
  auto dtype = GetParam();
  auto hidden64 = at::randn({37, 16}, at::kDouble), head64 = at::randn({29, 16}, at::kDouble);
  auto targets = at::randint(0, 29, {37}, at::kLong);
  auto grad_lp = at::randn({37}, at::kDouble), grad_ent = at::randn({37}, at::kDouble);

  auto h64 = hidden64.clone().requires_grad_(true), w64 = head64.clone().requires_grad_(true);
  auto logp = at::log_softmax(at::linear(h64, w64) / 0.7, -1);
  auto lp = logp.gather(1, targets.unsqueeze(1)).squeeze(1);
  auto ent = -(logp.exp() * logp).sum(-1);
  torch::autograd::backward({lp, ent}, {grad_lp, grad_ent});

  for (auto [chunk_bytes, saved_bytes] : {std::pair<int64_t, int64_t>{1, 0},
                                          {int64_t{1} << 30, 0},
                                          {1, int64_t{1} << 30},
                                          {int64_t{1} << 30, int64_t{1} << 30}}) {
    SCOPED_TRACE(std::to_string(chunk_bytes) + "/" + std::to_string(saved_bytes));
    auto hidden = hidden64.to(dtype).clone().requires_grad_(true);
    auto head = head64.to(dtype).clone().requires_grad_(true);
    auto fused = token_logprobs(hidden, head, targets,
                                {.temperature = 0.7,
                                 .with_entropy = true,
                                 .chunk_bytes = chunk_bytes,
                                 .saved_logits_bytes = saved_bytes});
    torch::autograd::backward({fused.logprobs_T, fused.entropy_T},
                              {grad_lp.to(at::kFloat), grad_ent.to(at::kFloat)});
    // Statistics and gradients in fp32 (the reference in fp64; float64 runs are inside the fp32
    // bounds too): tol::fp32_fused_logprob_bounds, from D = 16, V = 29, T = 37 and the inputs.
    auto b =
        testing::tol::fp32_fused_logprob_bounds(hidden64, head64, targets, 0.7, grad_lp, grad_ent);
    EXPECT_LE(testing::tol::noted("fused_logprob", testing::max_abs_diff(fused.logprobs_T, lp),
                                  b.logprob),
              b.logprob);
    EXPECT_LE(testing::tol::noted("fused_entropy", testing::max_abs_diff(fused.entropy_T, ent),
                                  b.entropy),
              b.entropy);
    EXPECT_LE(testing::tol::noted("fused_grad_hidden",
                                  testing::max_abs_diff(hidden.grad(), h64.grad()), b.grad_hidden),
              b.grad_hidden);
    EXPECT_LE(testing::tol::noted("fused_grad_head", testing::max_abs_diff(head.grad(), w64.grad()),
                                  b.grad_head),
              b.grad_head);
  }
}

INSTANTIATE_TEST_SUITE_P(AtenAndKernel, FusedLogprobs, ::testing::Values(at::kDouble, at::kFloat));

TEST(Models, InitIsDeterministicPerSeedAndFollowsHfScheme) {
  auto a = random_model(small_config(), 11), b = random_model(small_config(), 11);
  auto c = random_model(small_config(), 12);
  auto wa = a->named_weights(), wb = b->named_weights(), wc = c->named_weights();
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(at::equal(wa[i].second, wb[i].second));
  EXPECT_FALSE(
      at::equal(a->weight("model.embed_tokens.weight"), c->weight("model.embed_tokens.weight")));
  EXPECT_TRUE(at::equal(a->weight("model.norm.weight"), at::ones({32})));
  auto up = a->weight("model.layers.0.mlp.up_proj.weight");
  double std_dev = up.std().item<double>();
  // The sample std of n N(0, 0.2^2) draws has standard error 0.2 / sqrt(2 n) (n = 1536: 0.0036);
  // lambda = 6 standard errors as for the rounding bounds (tests/common/tolerances.h).
  EXPECT_NEAR(std_dev, 0.2, testing::tol::kLambda * 0.2 / std::sqrt(2.0 * up.numel()));
}

TEST(Models, SavedDirectoryReloadsIdenticallyAndLoadErrorsNameTheTensor) {
  auto dir = testing::scratch_dir();
  auto model = random_model(small_config(), 5);
  save_hf_model(*model, dir / "m", at::kFloat);
  auto reloaded = load_hf_model(dir / "m");
  auto wa = model->named_weights(), wb = reloaded->named_weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(at::equal(wa[i].second, wb[i].second));

  // A config that implies another shape than the file holds: a field checked directly against
  // the checkpoint, then one seen only in the shapes the architecture derives from it.
  const auto original = read_json_file(dir / "m" / "config.json");
  auto cfg = original;
  cfg["intermediate_size"] = 40;
  write_file_atomic(dir / "m" / "config.json", cfg.dump());
  auto msg = error_of([&] { load_hf_model(dir / "m"); });
  EXPECT_NE(msg.find("config.json: field 'intermediate_size' is 40 but the checkpoint has 48 "
                     "(model.layers.0.mlp.gate_proj.weight is [48, 32])"),
            std::string::npos)
      << msg;
  cfg = original;
  cfg["head_dim"] = 16;
  write_file_atomic(dir / "m" / "config.json", cfg.dump());
  msg = error_of([&] { load_hf_model(dir / "m"); });
  EXPECT_NE(msg.find("config.json: field 'head_dim' is 16 but the checkpoint has 8 "
                     "(model.layers.0.self_attn.q_proj.weight is [32, 32] for 4 attention heads)"),
            std::string::npos)
      << msg;
  cfg = original;
  cfg["num_key_value_heads"] = 4;  // not compared up front: the per-tensor shape check names it
  write_file_atomic(dir / "m" / "config.json", cfg.dump());
  msg = error_of([&] { load_hf_model(dir / "m"); });
  EXPECT_NE(msg.find("tensor 'model.layers.0.self_attn.k_proj.weight' has shape [16, 32] but "
                     "config.json implies [32, 32]"),
            std::string::npos)
      << msg;

  // A missing tensor.
  io::NamedTensors partial;
  for (auto& [name, t] : model->named_weights())
    if (name != "model.norm.weight") partial.emplace_back(name, t);
  std::filesystem::create_directories(dir / "p");
  io::save_hf_weights(dir / "p", partial);
  write_file_atomic(dir / "p" / "config.json", small_config().dump());
  msg = error_of([&] { load_hf_model(dir / "p"); });
  EXPECT_NE(msg.find("tensor 'model.norm.weight' is missing"), std::string::npos) << msg;

  msg = error_of([&] { load_hf_model(dir / "nope"); });
  EXPECT_NE(msg.find("nope: not a directory"), std::string::npos) << msg;

  // A malformed config.json.
  write_file_atomic(dir / "p" / "config.json", "{\"architectures\": [\"Qwen3ForCausalLM\"],");
  msg = error_of([&] { load_hf_model(dir / "p"); });
  EXPECT_NE(msg.find("p/config.json: invalid JSON at line 1"), std::string::npos) << msg;
  write_file_atomic(dir / "p" / "config.json", "[1, 2]");
  msg = error_of([&] { load_hf_model(dir / "p"); });
  EXPECT_NE(msg.find("p/config.json: expected a JSON object, got array"), std::string::npos) << msg;
}

// Peak resident memory of this process so far, in bytes.
uint64_t peak_rss() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

// A corrupted config.json (hidden_size=1e9 would allocate terabytes; num_hidden_layers=1e6
// grew a parameter list until bad_alloc; head_dim=1e9 built gigabytes of RoPE tables) fails at
// once, naming the field, before anything is allocated: against the checkpoint when there is one
// (loading, training), by the sanity limits and the memory estimate when there is none
// (init-model).
TEST(Models, CorruptedConfigSizesFailFastNamingTheFieldBeforeAllocating) {
  auto dir = testing::scratch_dir();
  save_hf_model(*random_model(small_config(), 1), dir / "m", at::kFloat);
  const auto original = read_json_file(dir / "m" / "config.json");
  struct Case {
    const char* field;
    Json value;
    const char* checkpoint_says;
  };
  for (const Case& c : {Case{"hidden_size", 1e9, "but the checkpoint has 32"},
                        Case{"num_hidden_layers", 1e6, "but the checkpoint has 2"},
                        Case{"vocab_size", 1000000000, "but the checkpoint has 50"},
                        Case{"head_dim", 1000000000, "but the checkpoint has 8"}}) {
    SCOPED_TRACE(c.field);
    auto cfg = original;
    cfg[c.field] = c.value;
    write_file_atomic(dir / "m" / "config.json", cfg.dump());
    const uint64_t rss_before = peak_rss();
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& msg : {error_of([&] { read_hf_config(dir / "m"); }),
                            error_of([&] { load_hf_model(dir / "m"); })}) {
      EXPECT_NE(msg.find("config.json: field '" + std::string(c.field) + "' is "),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find(c.checkpoint_says), std::string::npos) << msg;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
    EXPECT_LT(peak_rss() - rss_before, uint64_t{64} << 20) << "nothing sizeable was allocated";
  }
  write_file_atomic(dir / "m" / "config.json", original.dump());
  EXPECT_NO_THROW(load_hf_model(dir / "m"));

  // No checkpoint to compare with: init-model's path (create_model, then the memory estimate).
  const auto t0 = std::chrono::steady_clock::now();
  auto init_model_checks = [](const Json& cfg) {
    auto model = create_model(cfg, "tiny.json");
    check_memory_for_weights(*model, at::kFloat, at::kCPU, "tiny.json");
  };
  auto cfg = small_config();
  cfg["hidden_size"] = 1000000000;
  auto msg = error_of([&] { init_model_checks(cfg); });
  EXPECT_NE(msg.find("tiny.json: the model's "), std::string::npos) << msg;
  EXPECT_NE(msg.find("check hidden_size"), std::string::npos) << msg;
  cfg["vocab_size"] = 151936;  // a real vocabulary: beyond the sanity limit on parameters
  msg = error_of([&] { init_model_checks(cfg); });
  EXPECT_NE(msg.find("tiny.json: the model described has about "), std::string::npos) << msg;
  EXPECT_NE(msg.find("x hidden_size 1000000000"), std::string::npos) << msg;
  cfg = small_config();
  cfg["num_hidden_layers"] = 1000000;
  msg = error_of([&] { init_model_checks(cfg); });
  EXPECT_NE(msg.find("tiny.json: field 'num_hidden_layers' is 1000000, beyond furlong's limit"),
            std::string::npos)
      << msg;
  cfg = small_config();
  cfg["head_dim"] = 1000000000;  // RoPE's inverse frequencies alone would take gigabytes
  msg = error_of([&] { init_model_checks(cfg); });
  EXPECT_NE(msg.find("tiny.json: field 'head_dim' is 1000000000, beyond furlong's limit"),
            std::string::npos)
      << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

// Within the sanity limits but beyond this machine: the estimate fails before materializing.
TEST(Models, TheMemoryEstimateNamesTheNeedAndWhatIsAvailable) {
  auto cfg = small_config();
  cfg["hidden_size"] = 65536;  // 4 x 16384-dim heads: ~2.6e11 parameters, ~1 TB in fp32
  cfg["head_dim"] = 16384;
  cfg["intermediate_size"] = 65536 * 4;
  cfg["num_hidden_layers"] = 4;
  auto model = create_model(cfg, "big.json");
  auto msg = error_of([&] { check_memory_for_weights(*model, at::kFloat, at::kCPU, "big.json"); });
  EXPECT_NE(msg.find("big.json: the model's "), std::string::npos) << msg;
  EXPECT_NE(msg.find("is available (MemAvailable, /proc/meminfo)"), std::string::npos) << msg;
  EXPECT_NO_THROW(check_memory_for_weights(*create_model(small_config(), "small.json"), at::kFloat,
                                           at::kCPU, "small.json"));
}

}  // namespace
}  // namespace furlong::models
