// The engine on a hybrid Gated DeltaNet model (Qwen3_5ForCausalLM): each running sequence keeps
// its DeltaNet conv window and recurrent state between steps (prefill with the chunked rule,
// decode with the recurrent one), chunked prefill carries the state across chunks, and prefix
// sharing hands the leader's state after the prompt to its followers. Oracle: transformers'
// generate (scripts/oracles/hf_generate.py, its torch fallbacks), token for token.
//
// Log-prob tolerance: 1e-3, the bound tests/models/qwen3_5_test.cpp derives for a model of this
// shape (4 layers, width 48, 16 reductions per DeltaNet layer: 1.2e-3 for its documents of up
// to 70 tokens), here for prompts of up to 70 + 12 tokens; the decode steps' recurrent form has
// fewer reductions than the chunked one. Token equality is the main property: a state that is
// not carried, or not handed to a follower, gives other tokens.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "common/tiny_models.h"
#include "core/files.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine_test_util.h"
#include "models/causal_lm.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // the engine test helpers (engine_test_util.h)

// The shared tiny Qwen3.5, with room for prompts of 70 tokens and their outputs.
Json tiny_qwen3_5() {
  return ::furlong::testing::tiny_qwen3_5_config({{"max_position_embeddings", 512}});
}

constexpr int64_t kMaxNew = 12;
constexpr double kLogprobTol = 1e-3;  // header comment

class EngineQwen35 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prompts_ = random_prompts({5, 70, 1, 33, 12}, 97, 7);
    Json plan =
        Json::array({Json{{"name", "qwen3_5"},
                          {"config", tiny_qwen3_5()},
                          {"seed", 31},
                          {"dtype", "float32"},
                          {"attn", "eager"},
                          {"tokenizer_dir", ::furlong::testing::tokenizer_dir("qwen3").string()},
                          {"prompts", prompts_},
                          {"max_new_tokens", kMaxNew}}});
    dir_ = ::furlong::testing::cached_oracle(
        "engine_qwen3_5", "oracles/hf_generate.py", plan.dump(), [&](const fs::path& d) {
          write_file_atomic(d / "plan.json", plan.dump());
          return std::vector<std::string>{(d / "plan.json").string(), d.string()};
        });
  }
  static std::unique_ptr<Engine> load(EngineOptions o) {
    o.attn_implementation = "eager";
    return Engine::load((dir_ / "qwen3_5" / "model").string(), o);
  }
  static Json oracle() { return read_json_file(dir_ / "qwen3_5" / "outputs.json"); }
  static void expect_oracle_tokens(const std::vector<GenerateOutput>& outputs) {
    const Json want = oracle();
    ASSERT_EQ(outputs.size(), prompts_.size());
    for (size_t i = 0; i < prompts_.size(); ++i) {
      EXPECT_EQ(outputs[i].output_ids, want["outputs"][i].get<std::vector<int64_t>>())
          << "prompt " << i;
      const auto lps = want["logprobs"][i].get<std::vector<double>>();
      for (size_t t = 0; t < lps.size() && t < outputs[i].output_logprobs.size(); ++t) {
        EXPECT_NEAR(outputs[i].output_logprobs[t], lps[t], kLogprobTol)
            << "prompt " << i << " token " << t;
      }
    }
  }
  static std::vector<std::vector<int64_t>> prompts_;
  static fs::path dir_;
};
std::vector<std::vector<int64_t>> EngineQwen35::prompts_;
fs::path EngineQwen35::dir_;

TEST_F(EngineQwen35, GreedyEqualsTransformersGenerateTokenForToken) {
  auto engine = load(small_engine_options());
  expect_oracle_tokens(engine->generate(greedy_requests(prompts_, kMaxNew)));
}

// Prompts prefilled in chunks of 16 tokens (the state carried from chunk to chunk) give the
// tokens of a one-shot prefill.
TEST_F(EngineQwen35, ChunkedPrefillCarriesTheStateAcrossChunks) {
  auto o = small_engine_options();
  o.chunked_prefill_size = 16;
  o.max_prefill_tokens = 16;
  auto engine = load(o);
  expect_oracle_tokens(engine->generate(greedy_requests(prompts_, kMaxNew)));
}

// Three samples of each prompt, submitted together: the followers start from the leader's
// state after the prompt, and every sample's tokens are the single run's.
TEST_F(EngineQwen35, PrefixSharingHandsTheLeadersStateToItsFollowers) {
  auto engine = load(small_engine_options());
  std::vector<std::vector<int64_t>> repeated;
  for (const auto& p : prompts_) {
    for (int k = 0; k < 3; ++k) repeated.push_back(p);
  }
  auto outputs = engine->generate(greedy_requests(repeated, kMaxNew));
  EXPECT_GT(engine->model_info()["prefix_shared_tokens"].get<int64_t>(), 0);
  const Json want = oracle();
  for (size_t i = 0; i < repeated.size(); ++i) {
    EXPECT_EQ(outputs[i].output_ids, want["outputs"][i / 3].get<std::vector<int64_t>>())
        << "sample " << i;
  }
}

// With exact log-probs the engine reports the trainer's scoring of each finished sequence,
// which starts every document from a zero state: equal to the decode-time values to rounding.
TEST_F(EngineQwen35, ExactLogprobsAreTheTrainersScoring) {
  auto o = small_engine_options();
  o.exact_logprobs = true;
  auto engine = load(o);
  auto outputs = engine->generate(greedy_requests(prompts_, kMaxNew));
  expect_oracle_tokens(outputs);
  // The trainer's scoring of all five sequences packed in one batch (another packing than the
  // engine's, which scores the requests that finish in one step together): the same bits.
  auto a = compare_with_trainer(engine->model(), prompts_, outputs, 1.0, models::AttnImpl::kEager);
  EXPECT_GT(a.count, 0);
  EXPECT_EQ(a.max_abs, 0.0);
}

// Memory: K/V only for the one softmax-attention layer of four, and the DeltaNet states of
// --max-running-requests sequences (with the decode step's spare) reserved before the blocks:
//   kv_bytes <= fraction * total - weights - running * state_bytes < kv_bytes + one block.
TEST_F(EngineQwen35, CacheHoldsKvOfAttentionLayersAndReservesTheStates) {
  auto o = small_engine_options();
  o.max_total_tokens = 0;
  o.mem_fraction_static = 0.5;
  o.test_memory_bytes = 4'000'000;  // small enough that memory, not the context, bounds it
  o.max_running_requests = 16;
  auto engine = load(o);
  const auto info = engine->model_info();
  const auto& c = engine->model().config();
  const auto& la = c.linear_attention;
  ASSERT_EQ(la.layers.size(), 3u);
  const int64_t token_bytes =
      KvCache::bytes_per_token(1, c.num_key_value_heads, c.head_dim, at::kFloat);
  // Per DeltaNet layer: the conv window, the recurrent state and its spare (decode writes it).
  const int64_t state_bytes =
      3 * (la.conv_channels() * (la.conv_kernel - 1) * 4 +
           2 * la.num_value_heads * la.key_head_dim * la.value_head_dim * 4);
  EXPECT_EQ(info["linear_state_bytes_per_sequence"].get<int64_t>(), state_bytes);
  int64_t weights = 0;
  for (const auto& [name, t] : engine->model().named_weights()) {
    weights += static_cast<int64_t>(t.nbytes());
  }
  const int64_t budget = 2'000'000 - weights - 16 * state_bytes;
  const int64_t kv = info["kv_cache_bytes"].get<int64_t>();
  const int64_t tokens = info["max_total_tokens"].get<int64_t>();
  EXPECT_EQ(kv, tokens * token_bytes);
  EXPECT_LE(kv, budget);
  EXPECT_GT(kv + o.kv_block_size * token_bytes, budget);
  // Still generates what transformers does (the DeltaNet layers never touch the cache).
  expect_oracle_tokens(engine->generate(greedy_requests(prompts_, kMaxNew)));
}

}  // namespace
}  // namespace furlong::engine
