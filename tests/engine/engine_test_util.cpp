#include "engine_test_util.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <random>

#include "common/random_models.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "core/dtype.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
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

Agreement compare_with_trainer(const models::CausalLM& model,
                               const std::vector<std::vector<int64_t>>& prompts,
                               const std::vector<GenerateOutput>& outputs, double temperature,
                               models::AttnImpl attn, bool share_prompts) {
  c10::InferenceMode guard;
  std::vector<std::vector<int64_t>> docs;
  std::vector<int64_t> prompt_lengths, rows, targets;
  std::vector<float> engine_lp;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto doc = prompts[i];
    doc.insert(doc.end(), outputs[i].output_ids.begin(), outputs[i].output_ids.end());
    docs.push_back(doc);
    prompt_lengths.push_back(static_cast<int64_t>(prompts[i].size()));
  }
  std::vector<const std::vector<int64_t>*> views;
  for (const auto& d : docs) views.push_back(&d);
  const auto packed = models::pack_sequences(views, prompt_lengths,
                                             share_prompts && model.supports_shared_prefixes());
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (size_t t = 0; t < outputs[i].output_ids.size(); ++t) {
      rows.push_back(packed.row(i, static_cast<int64_t>(prompts[i].size() + t) - 1));
      targets.push_back(outputs[i].output_ids[t]);
      engine_lp.push_back(outputs[i].output_logprobs[t]);
    }
  }
  models::ForwardOptions options;
  options.attn = attn;
  auto hidden_PD = model.forward_hidden(packed.batch, options);
  const auto& w = model.weights();
  auto head = model.head_weight(w[models::CausalLM::kEmbedUnit], w[model.final_unit()]);
  models::LogProbOptions lo;
  lo.temperature = temperature;
  lo.with_entropy = false;
  auto lp = models::token_logprobs(hidden_PD.index_select(0, at::tensor(rows, at::kLong)), head,
                                   at::tensor(targets, at::kLong), lo)
                .logprobs_T;
  auto diff = (lp - at::tensor(engine_lp, at::kFloat)).abs();
  Agreement a{diff.max().item<double>(), diff.mean().item<double>(), diff.numel()};
  auto h_rows = hidden_PD.index_select(0, at::tensor(rows, at::kLong));
  a.abs_scale = furlong::testing::tol::head_abs_scale(h_rows, head);
  auto logits = at::mm(h_rows.to(at::kFloat), head.to(at::kFloat).t());
  for (int64_t r = 0; r < logits.size(0); ++r) {
    a.lp_rounding = std::max(a.lp_rounding, furlong::testing::tol::fp32_softmax_row_bound(
                                                logits[r], targets[r], temperature)
                                                .logprob_rounding);
  }
  return a;
}

}  // namespace furlong::engine::testing
