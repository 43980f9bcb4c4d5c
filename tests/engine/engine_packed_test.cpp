// --prepack-weights (EngineOptions::prepack_weights, kernels/packed_linear.h): which weights the
// engine packs, that packing changes nothing where the packed GEMM is at::linear's own kernel
// (bf16 on AMX), and that every weight write packs again, so that an updated, released or
// refilled engine generates exactly what a fresh engine with the new weights generates.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "engine/weight_sync.h"
#include "engine_test_util.h"
#include "kernels/packed_linear.h"
#include "models/hf_model.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;
using namespace furlong::engine::testing;

constexpr int64_t kVocab = 8192;

// Weights big enough to pack (1M elements): gate, up and down [8192, 128] in each of 2 layers,
// and the untied head [8192, 128]; the attention projections and the embedding are not packed.
Json packable_config() {
  auto c = tiny_config("qwen3", kVocab);
  c["hidden_size"] = 128;
  c["intermediate_size"] = 8192;
  c["num_attention_heads"] = 4;
  c["head_dim"] = 32;
  return c;
}
constexpr int64_t kPackedWeights = 7, kPackedBytes = kPackedWeights * 8192 * 128 * 2;

class EnginePackedWeights : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!kernels::packed_linear_available()) return;
    auto root = furlong::testing::scratch_dir();
    old_dir_ = new fs::path(root / "old");
    new_dir_ = new fs::path(root / "new");
    write_tiny_model(*old_dir_, packable_config(), 1, "bfloat16");
    write_tiny_model(*new_dir_, packable_config(), 2, "bfloat16");
  }
  static void TearDownTestSuite() {
    delete old_dir_;
    delete new_dir_;
  }
  void SetUp() override {
    if (!kernels::packed_linear_available()) GTEST_SKIP() << "no oneDNN prepacking ops here";
  }
  static std::unique_ptr<Engine> load(const fs::path& dir, const std::string& prepack) {
    auto o = small_engine_options("bfloat16");
    o.prepack_weights = parse_prepack_weights(prepack);
    return Engine::load(dir.string(), o);
  }
  // 9 prompts of 10-16 tokens: prefill and decode steps of 9 rows and more, which the packed
  // GEMM takes (decode rows 1..7 go to other kernels on AVX-512 CPUs).
  static std::vector<GenerateOutput> outputs_of(Engine& engine) {
    return engine.generate(
        greedy_requests(random_prompts({10, 16, 12, 11, 13, 14, 15, 10, 12}, kVocab, 9), 6));
  }
  static void expect_same(const std::vector<GenerateOutput>& a,
                          const std::vector<GenerateOutput>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].output_ids, b[i].output_ids) << "request " << i;
      EXPECT_EQ(a[i].output_logprobs, b[i].output_logprobs) << "request " << i;
    }
  }
  static NamedTensors new_weights() {
    models::LoadOptions o;
    o.dtype = at::kBFloat16;
    return models::load_hf_model(*new_dir_, o)->named_weights();
  }
  static fs::path* old_dir_;
  static fs::path* new_dir_;
};
fs::path* EnginePackedWeights::old_dir_ = nullptr;
fs::path* EnginePackedWeights::new_dir_ = nullptr;

TEST_F(EnginePackedWeights, PackTheLayersAndTheHeadOfBf16Models) {
  auto on = load(*old_dir_, "on");
  EXPECT_EQ(on->model_info()["packed_weight_bytes"].get<int64_t>(), kPackedBytes);
  auto off = load(*old_dir_, "off");
  EXPECT_EQ(off->model_info()["packed_weight_bytes"].get<int64_t>(), 0);
  auto automatic = load(*old_dir_, "auto");
  const bool amx = kernels::packed_linear_pays_off(at::kBFloat16, c10::Device(c10::kCPU));
  EXPECT_EQ(automatic->model_info()["packed_weight_bytes"].get<int64_t>(), amx ? kPackedBytes : 0);
  auto o = small_engine_options("float32");  // fp32 weights are never packed
  o.prepack_weights = PrepackWeights::kOn;
  EXPECT_EQ(Engine::load(old_dir_->string(), o)->model_info()["packed_weight_bytes"].get<int64_t>(),
            0);
  auto msg = furlong::testing::error_of([&] { parse_prepack_weights("always"); });
  EXPECT_NE(msg.find("--prepack-weights must be auto, on or off"), std::string::npos) << msg;
}

// A tied head is the embedding's tensor: packed once, as the head, and packed again when an
// update writes the embedding.
TEST_F(EnginePackedWeights, PackATiedHeadOnceAndAgainAfterAnUpdate) {
  auto c = packable_config();
  c["tie_word_embeddings"] = true;
  const auto root = furlong::testing::scratch_dir();
  write_tiny_model(root / "tied_old", c, 3, "bfloat16");
  write_tiny_model(root / "tied_new", c, 4, "bfloat16");
  auto expected = outputs_of(*load(root / "tied_new", "on"));
  auto engine = load(root / "tied_old", "on");
  EXPECT_EQ(engine->model_info()["packed_weight_bytes"].get<int64_t>(), kPackedBytes);
  ASSERT_NE(outputs_of(*engine)[0].output_logprobs, expected[0].output_logprobs);
  models::LoadOptions o;
  o.dtype = at::kBFloat16;
  engine->update_weights_from_tensors(models::load_hf_model(root / "tied_new", o)->named_weights());
  expect_same(outputs_of(*engine), expected);
}

// On AMX the packed GEMM is at::linear's kernel on another weight layout: the same bits.
TEST_F(EnginePackedWeights, GiveTheUnpackedResultsOnAmx) {
  if (!kernels::packed_linear_pays_off(at::kBFloat16, c10::Device(c10::kCPU))) {
    GTEST_SKIP() << "no AMX: packed and unpacked GEMMs are different kernels here";
  }
  expect_same(outputs_of(*load(*old_dir_, "on")), outputs_of(*load(*old_dir_, "off")));
}

// "auto" packs (on AMX) only while the weights and their packed copies take at most half of
// what --mem-fraction-static gives weights and KV cache: about 31 MB here.
TEST_F(EnginePackedWeights, AutoLeavesTheKvCacheHalfTheBudget) {
  if (!kernels::packed_linear_pays_off(at::kBFloat16, c10::Device(c10::kCPU))) {
    GTEST_SKIP() << "no AMX: auto never packs here";
  }
  auto o = small_engine_options("bfloat16");
  o.mem_fraction_static = 0.7;
  o.test_memory_bytes = 200'000'000;  // half of 0.7 of it: 70 MB
  EXPECT_EQ(Engine::load(old_dir_->string(), o)->model_info()["packed_weight_bytes"].get<int64_t>(),
            kPackedBytes);
  o.test_memory_bytes = 60'000'000;  // 21 MB
  EXPECT_EQ(Engine::load(old_dir_->string(), o)->model_info()["packed_weight_bytes"].get<int64_t>(),
            0);
}

// A stale packed copy would keep generating with the old weights.
TEST_F(EnginePackedWeights, AnUpdateReleaseAndRefillPackAgain) {
  auto expected = outputs_of(*load(*new_dir_, "on"));
  auto engine = load(*old_dir_, "on");
  auto before = outputs_of(*engine);
  ASSERT_NE(before[0].output_logprobs, expected[0].output_logprobs)
      << "the two seeds should give different models";

  engine->update_weights_from_tensors(new_weights(), 1);
  expect_same(outputs_of(*engine), expected);

  engine->release_memory(/*include_weights=*/true);
  EXPECT_EQ(engine->model_info()["packed_weight_bytes"].get<int64_t>(), 0);
  engine->resume_memory();
  engine->update_weights_from_tensors(new_weights(), 2);
  EXPECT_EQ(engine->model_info()["packed_weight_bytes"].get<int64_t>(), kPackedBytes);
  expect_same(outputs_of(*engine), expected);
}

}  // namespace
}  // namespace furlong::engine
