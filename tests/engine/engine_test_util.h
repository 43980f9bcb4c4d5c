// Tiny models for the engine tests: written in HF format by furlong's own model code (seeded
// transformers-style init), with the real Qwen3 tokenizer files next to them.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/json_util.h"
#include "engine/engine.h"
#include "models/causal_lm.h"

namespace furlong::engine::testing {

// A tiny config of one architecture ("qwen3", "qwen2" or "llama"); vocab 97 unless given.
Json tiny_config(const std::string& model_type, int64_t vocab_size = 97);

// Writes a randomly initialized model (seed, dtype) with tokenizer files to `dir`.
void write_tiny_model(const std::filesystem::path& dir, const Json& config, uint64_t seed,
                      const std::string& dtype);

// Engine options for small tests: small KV blocks so tables span several blocks.
EngineOptions small_engine_options(const std::string& dtype = "");

// Greedy requests (temperature 0, ignore eos) of the given prompts.
std::vector<GenerateRequest> greedy_requests(const std::vector<std::vector<int64_t>>& prompts,
                                             int64_t max_new_tokens);

// Deterministic pseudo-random prompts with ids in [0, vocab).
std::vector<std::vector<int64_t>> random_prompts(const std::vector<int>& lengths, int64_t vocab,
                                                 uint32_t seed);

// The engine's reported log-probs of `outputs` against the trainer's computation of them:
// forward_hidden over the packed full sequences (with `attn`; prompts held once as the trainer's
// default --pack-shared-prompts does, where the model supports it), then token_logprobs at the
// generated positions with the rollout temperature.
struct Agreement {
  double max_abs = 0, mean_abs = 0;
  int64_t count = 0;
  // For the bounds: max_j sum_k |h_k W_jk| over the compared rows, and the largest fp32
  // log_softmax rounding bound of one implementation on those rows (tests/common/tolerances.h).
  double abs_scale = 0, lp_rounding = 0;
};
Agreement compare_with_trainer(const models::CausalLM& model,
                               const std::vector<std::vector<int64_t>>& prompts,
                               const std::vector<GenerateOutput>& outputs, double temperature,
                               models::AttnImpl attn = models::AttnImpl::kSdpa,
                               bool share_prompts = true);

}  // namespace furlong::engine::testing
