#include "engine_test_util.h"

#include <ATen/ATen.h>

#include <random>

#include "common/random_models.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "core/dtype.h"
#include "models/hf_model.h"
#include "models/registry.h"

namespace furlong::engine::testing {

namespace fs = std::filesystem;

Json tiny_config(const std::string& model_type, int64_t vocab_size) {
  using furlong::testing::TinyFamily;
  const auto family = model_type == "qwen3"   ? TinyFamily::kQwen3
                      : model_type == "qwen2" ? TinyFamily::kQwen2
                                              : TinyFamily::kLlama;
  Json overrides{{"vocab_size", vocab_size},       {"intermediate_size", 96},
                 {"max_position_embeddings", 512}, {"tie_word_embeddings", model_type == "qwen2"},
                 {"initializer_range", 0.1},       {"rms_norm_eps", 1e-6}};
  if (model_type == "qwen3") overrides["head_dim"] = 24;
  return furlong::testing::tiny_model_config(family, overrides);
}

void write_tiny_model(const fs::path& dir, const Json& config, uint64_t seed,
                      const std::string& dtype) {
  furlong::testing::write_random_model(dir, config, seed, parse_dtype(dtype, "dtype"),
                                       furlong::testing::tokenizer_dir("qwen3"));
}

EngineOptions small_engine_options(const std::string& dtype) {
  EngineOptions o;
  o.dtype = dtype;
  o.device = "cpu";
  o.kv_block_size = 4;
  o.max_total_tokens = 8192;
  return o;
}

std::vector<GenerateRequest> greedy_requests(const std::vector<std::vector<int64_t>>& prompts,
                                             int64_t max_new_tokens) {
  std::vector<GenerateRequest> requests;
  for (const auto& p : prompts) {
    GenerateRequest r;
    r.input_ids = p;
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.max_new_tokens = max_new_tokens;
    requests.push_back(r);
  }
  return requests;
}

std::vector<std::vector<int64_t>> random_prompts(const std::vector<int>& lengths, int64_t vocab,
                                                 uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::vector<std::vector<int64_t>> prompts;
  for (int len : lengths) {
    std::vector<int64_t> p(len);
    for (auto& t : p) t = token(rng);
    prompts.push_back(p);
  }
  return prompts;
}

}  // namespace furlong::engine::testing
