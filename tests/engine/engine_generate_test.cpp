// Generation: greedy parity with transformers' generate, engine log-probs against the trainer's
// recomputation, sampling reproducibility / batch independence, the sampled distribution
// (chi-square), stop conditions and abort.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <thread>

#include "common/test_util.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "engine/sampler.h"
#include "engine_test_util.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;
using namespace furlong::engine::testing;

// ---- greedy parity with transformers (the oracle creates each model) ----

struct GreedyCase {
  std::string name;
  Json config;
  int seed;
  std::string attn = "sdpa";
};

Json oracle_config(const std::string& type) {
  Json c = tiny_config(type);
  if (type == "llama") {
    c["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                            {"factor", 8.0},           {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8}};
  }
  return c;
}

// Tolerance for fp32 log-probs against transformers': each implementation within the fp32
// forward budget of the exact logits (fp32_logprob_budget), so twice that, plus each side's
// log_softmax rounding (as in tests/models/model_parity_test.cpp).
double greedy_logprob_tol(const models::CausalLM& model,
                          const std::vector<std::vector<int64_t>>& prompts,
                          const std::vector<GenerateOutput>& outputs);
TEST(EngineGreedy, MatchesTransformersGenerateTokenForToken) {
  std::vector<GreedyCase> cases = {{"qwen3", oracle_config("qwen3"), 11},
                                   {"qwen2", oracle_config("qwen2"), 12},
                                   {"llama", oracle_config("llama"), 13},
                                   {"qwen3_eager", oracle_config("qwen3"), 14, "eager"}};
  auto prompts = random_prompts({3, 11, 25, 7, 1}, 97, 99);
  const int64_t max_new = 20;
  Json plan = Json::array();
  for (const auto& c : cases) {
    plan.push_back({{"name", c.name},
                    {"config", c.config},
                    {"seed", c.seed},
                    {"dtype", "float32"},
                    {"attn", c.attn},
                    {"tokenizer_dir", furlong::testing::tokenizer_dir("qwen3").string()},
                    {"prompts", prompts},
                    {"max_new_tokens", max_new}});
  }
  auto dir = furlong::testing::cached_oracle(
      "engine_greedy", "oracles/hf_generate.py", plan.dump(), [&](const fs::path& d) {
        write_file_atomic(d / "plan.json", plan.dump());
        return std::vector<std::string>{(d / "plan.json").string(), d.string()};
      });
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto options = small_engine_options();
    options.attn_implementation = c.attn;
    auto engine = Engine::load((dir / c.name / "model").string(), options);
    auto outputs = engine->generate(greedy_requests(prompts, max_new));
    Json oracle = read_json_file(dir / c.name / "outputs.json");
    double max_lp_diff = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto expected = oracle["outputs"][i].get<std::vector<int64_t>>();
      EXPECT_EQ(outputs[i].output_ids, expected) << "prompt " << i;
      EXPECT_EQ(outputs[i].finish_reason, FinishReason::kLength);
      auto lps = oracle["logprobs"][i].get<std::vector<double>>();
      for (size_t t = 0; t < lps.size() && t < outputs[i].output_logprobs.size(); ++t) {
        max_lp_diff = std::max(max_lp_diff, std::abs(outputs[i].output_logprobs[t] - lps[t]));
      }
    }
    double tol = greedy_logprob_tol(engine->model(), prompts, outputs);
    EXPECT_LT(tol, 1e-3) << "the bound must stay meaningful";
    EXPECT_LE(furlong::testing::tol::noted("engine_vs_hf_logprob", max_lp_diff, tol), tol);
    std::cout << c.name << ": max |logprob - transformers| = " << max_lp_diff << "\n";
  }
}

// ---- log-probs against the trainer's recomputation ----

// One fp32 implementation's forward rounding budget for these engine models (2 layers, longest
// reduction 96: MLP width), in log-prob units at temperature T: a log-prob moves by at most
// 2 max |dz| / T (tests/models/model_parity_test.cpp derives the budget).
double fp32_logprob_budget(const Agreement& a, double temperature) {
  return 2 *
         furlong::testing::tol::forward_logits_budget(2, 96, a.abs_scale,
                                                      furlong::testing::tol::kUFp32) /
         temperature;
}

double greedy_logprob_tol(const models::CausalLM& model,
                          const std::vector<std::vector<int64_t>>& prompts,
                          const std::vector<GenerateOutput>& outputs) {
  auto a = compare_with_trainer(model, prompts, outputs, 1.0);  // for the scale
  return 2 * fp32_logprob_budget(a, 1.0) + 2 * a.lp_rounding;
}

// exact_logprobs scores finished requests together later (Engine::Impl::exact_pending), but never
// across a weight update: a request that finished while another still runs, followed by an
// update, gets the log-probs of the weights that generated its tokens. The short request's last
// token callback waits until the update has been asked for, so the update arrives while the
// request is unscored; it is then scored alone, as the trainer scores it here (difference 0),
// while the long request goes on with the new weights.
TEST(EngineLogprobs, DeferredExactScoringUsesTheWeightsThatGeneratedTheTokens) {
  auto dir = furlong::testing::scratch_dir() / "model";
  write_tiny_model(dir, tiny_config("qwen3"), 23, "float32");
  auto options = small_engine_options();
  options.exact_logprobs = true;
  auto engine = Engine::load(dir.string(), options);
  auto before = models::load_hf_model(dir.string());  // the weights that generate
  auto prompts = random_prompts({6, 9}, 97, 3);
  std::promise<GenerateOutput> short_done, long_done;
  std::promise<void> update_asked, short_generated;
  auto asked = update_asked.get_future().share();
  std::atomic<int64_t> short_tokens{0};
  std::vector<Engine::Submission> batch(2);
  for (size_t i = 0; i < 2; ++i) {
    batch[i].request.input_ids = prompts[i];
    batch[i].request.sampling.temperature = 0.8;
    batch[i].request.sampling.seed = 7 + i;
    batch[i].request.sampling.ignore_eos = true;
    batch[i].request.sampling.max_new_tokens = i == 0 ? 3 : 48;
  }
  batch[0].on_done = [&](RequestId, GenerateOutput out) { short_done.set_value(std::move(out)); };
  batch[1].on_done = [&](RequestId, GenerateOutput out) { long_done.set_value(std::move(out)); };
  batch[0].on_tokens = [&](RequestId, const std::vector<int64_t>& ids, const std::vector<float>&) {
    if ((short_tokens += static_cast<int64_t>(ids.size())) == 3) {
      short_generated.set_value();
      asked.wait_for(std::chrono::seconds(10));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the update is now waiting
    }
  };
  engine->submit_all(std::move(batch));
  auto doubled = before->named_weights();
  for (auto& [name, w] : doubled) w = w * 2;
  std::thread updater([&] {
    short_generated.get_future().wait_for(std::chrono::seconds(10));
    update_asked.set_value();
    engine->update_weights_from_tensors(doubled, 1);
  });
  auto first = short_done.get_future();
  ASSERT_EQ(first.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  updater.join();
  auto second = long_done.get_future();
  ASSERT_EQ(second.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  auto out = first.get();
  ASSERT_EQ(out.output_ids.size(), 3u);
  EXPECT_EQ(compare_with_trainer(*before, {prompts[0]}, {out}, 0.8).max_abs, 0.0);
  EXPECT_EQ(second.get().output_ids.size(), 48u);
}

// With exact_logprobs (the default) the engine reports the trainer's own computation over the
// finished sequences, so the difference must be exactly zero in both dtypes when the trainer
// scores a sequence packed as the engine did. The engine re-scores the sequences that finished
// in one step together, and the CPU GEMMs round a row differently with the number of rows in
// the call (MKL's sgemm: rows of x[:M] W^T differ from those of the full product at most M,
// e.g. on a Xeon with MKL capped at AVX2), so each request here is generated alone and scored
// alone, where engine and trainer run the same shapes.
//
// Without it (decode-time log-probs), the prompt is prefilled exactly as the trainer computes
// it and only decode steps differ (attention over the cache with one query row, matmuls over a
// different number of rows). fp32: both are within the forward budget of the exact logits, so
// twice fp32_logprob_budget plus both softmax roundings (~1e-4 here; measured ~1e-6). bf16: the
// runs differ only where a bf16 rounding of an activation lands on the other side, by one bf16
// ulp (2 u_bf16 of its magnitude); with every element of the final hidden state flipped the
// logits would move by 2 u_bf16 max_j sum_k |h_k W_jk| (flips upstream are renormalized as in
// the fp32 budget), so log-probs by 2 * 2 u_bf16 abs_scale / T (~0.08 here; measured ~0.03).
// Flips are rare (most tokens have none), so the mean |d| must stay below a tenth of that bound:
// a systematic error would put every token near it. (The decode attention kernel orders its sums
// unlike SDPA, whose bits the trainer's prefill has; about 2% of its bf16 outputs differ from
// SDPA's by an ulp, which puts the mean here near 5.5e-3, against ~3e-3 with SDPA.)
TEST(EngineLogprobs, AgreeWithTrainerRecomputation) {
  for (bool exact : {true, false}) {
    for (std::string dtype : {"float32", "bfloat16"}) {
      SCOPED_TRACE(dtype + (exact ? " exact" : " decode-time"));
      auto dir = furlong::testing::scratch_dir() / ("model_" + dtype);
      if (!fs::exists(dir)) write_tiny_model(dir, tiny_config("qwen3"), 21, dtype);
      auto options = small_engine_options();
      options.exact_logprobs = exact;
      auto engine = Engine::load(dir.string(), options);
      auto prompts = random_prompts({5, 17, 2, 30, 9, 12}, 97, 7);
      const double temperature = 0.8;
      std::vector<GenerateRequest> requests;
      for (size_t i = 0; i < prompts.size(); ++i) {
        GenerateRequest r;
        r.input_ids = prompts[i];
        r.sampling.temperature = temperature;
        r.sampling.max_new_tokens = 16 + 3 * static_cast<int64_t>(i);  // finish at different steps
        r.sampling.seed = 100 + i;
        requests.push_back(r);
      }
      if (exact) {
        // Each request alone, scored alone: the same packing on both sides.
        double max_abs = 0;
        int64_t count = 0;
        for (size_t i = 0; i < prompts.size(); ++i) {
          auto out = engine->generate({requests[i]});
          auto a = compare_with_trainer(engine->model(), {prompts[i]}, out, temperature);
          max_abs = std::max(max_abs, a.max_abs);
          count += a.count;
        }
        std::cout << dtype << " exact: engine vs trainer log-probs over " << count
                  << " tokens: max |d| = " << max_abs << "\n";
        EXPECT_EQ(max_abs, 0.0);
        continue;
      }
      auto outputs = engine->generate(requests);
      auto a = compare_with_trainer(engine->model(), prompts, outputs, temperature);
      std::cout << dtype << " decode-time: engine vs trainer log-probs over " << a.count
                << " tokens: max |d| = " << a.max_abs << ", mean |d| = " << a.mean_abs << "\n";
      if (dtype == "float32") {
        EXPECT_LE(furlong::testing::tol::noted(
                      "engine_decode_vs_trainer_fp32", a.max_abs,
                      2 * fp32_logprob_budget(a, temperature) + 2 * a.lp_rounding),
                  2 * fp32_logprob_budget(a, temperature) + 2 * a.lp_rounding);
      } else {
        EXPECT_LE(furlong::testing::tol::noted(
                      "engine_decode_vs_trainer_bf16", a.max_abs,
                      4 * furlong::testing::tol::kUBf16 * a.abs_scale / temperature),
                  4 * furlong::testing::tol::kUBf16 * a.abs_scale / temperature);
        EXPECT_LE(a.mean_abs, 0.1 * 4 * furlong::testing::tol::kUBf16 * a.abs_scale / temperature);
      }
    }
  }
}

// ---- sampling ----

class EngineSampling : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(furlong::testing::scratch_dir() / "model");
    write_tiny_model(*dir_, tiny_config("qwen3"), 31, "float32");
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path* dir_;
};
fs::path* EngineSampling::dir_ = nullptr;

GenerateRequest sampled(std::vector<int64_t> prompt, uint64_t seed, int64_t max_new) {
  GenerateRequest r;
  r.input_ids = std::move(prompt);
  r.sampling.temperature = 1.0;
  r.sampling.top_p = 0.9;
  r.sampling.max_new_tokens = max_new;
  r.sampling.seed = seed;
  return r;
}

TEST_F(EngineSampling, SameSeedSameOutputWhateverTheBatch) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  auto prompt = random_prompts({8}, 97, 1)[0];
  auto alone1 = engine->generate({sampled(prompt, 42, 30)})[0];
  auto alone2 = engine->generate({sampled(prompt, 42, 30)})[0];
  EXPECT_EQ(alone1.output_ids, alone2.output_ids);
  std::vector<GenerateRequest> batch;
  auto others = random_prompts({3, 20, 5, 14, 9, 1, 26}, 97, 2);
  for (size_t i = 0; i < others.size(); ++i) batch.push_back(sampled(others[i], i, 10 + 5 * i));
  batch.insert(batch.begin() + 3, sampled(prompt, 42, 30));
  auto in_batch = engine->generate(batch)[3];
  EXPECT_EQ(alone1.output_ids, in_batch.output_ids);
  auto other_seed = engine->generate({sampled(prompt, 43, 30)})[0];
  EXPECT_NE(alone1.output_ids, other_seed.output_ids);
}

// A step draws its rows' tokens in parallel (one row per thread at a time): greedy, sampled,
// penalized and top-log-prob rows of one batch give the same tokens, log-probs and top
// log-probs on one thread as on two.
TEST_F(EngineSampling, RowsDrawnInParallelGiveTheResultsOfOneThread) {
  auto prompts = random_prompts({6, 11, 3, 17, 8, 5}, 97, 3);
  std::vector<GenerateRequest> batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r = sampled(prompts[i], 100 + i, 12);
    if (i % 3 == 0) r.sampling.temperature = 0.0;     // greedy
    if (i == 3) r.sampling.repetition_penalty = 1.3;  // greedy rows are 0 and 3
    if (i == 4) r.sampling.frequency_penalty = 0.5;
    if (i == 5) r.sampling.min_new_tokens = 4;
    if (i == 2 || i == 3) r.sampling.top_logprobs_num = 3;
    batch.push_back(std::move(r));
  }
  std::vector<std::vector<GenerateOutput>> outs;
  for (int64_t threads : {1, 2}) {
    auto options = small_engine_options();
    options.num_threads = threads;
    outs.push_back(Engine::load(dir_->string(), options)->generate(batch));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(outs[0][i].output_ids, outs[1][i].output_ids) << "request " << i;
    EXPECT_EQ(outs[0][i].output_logprobs, outs[1][i].output_logprobs) << "request " << i;
    EXPECT_EQ(outs[0][i].output_top_logprobs, outs[1][i].output_top_logprobs) << "request " << i;
  }
}

// SGLang's decode log line: one every decode_log_interval steps that sampled tokens, naming
// the running and queued requests, the KV-cache use and the rate; none with interval 0.
TEST_F(EngineSampling, LogsADecodeLineEveryIntervalSteps) {
  for (int64_t interval : {4, 0}) {
    auto options = small_engine_options();
    options.decode_log_interval = interval;
    auto engine = Engine::load(dir_->string(), options);
    auto prompts = random_prompts({5, 7}, 97, 3);
    ::testing::internal::CaptureStderr();
    // Both requests sample a token in each of 10 steps (the first one with the prefill).
    engine->generate({sampled(prompts[0], 1, 10), sampled(prompts[1], 2, 10)});
    const std::string log = ::testing::internal::GetCapturedStderr();
    size_t lines = 0;
    for (size_t at = log.find("engine: decode: "); at != std::string::npos;
         at = log.find("engine: decode: ", at + 1)) {
      ++lines;
    }
    EXPECT_EQ(lines, interval == 0 ? 0u : 2u) << log;
    if (interval > 0) {
      EXPECT_NE(log.find("2 running, 0 queued, KV cache "), std::string::npos) << log;
      EXPECT_NE(log.find("tokens/s over the last 4 steps"), std::string::npos) << log;
    }
  }
}

// Wilson-Hilferty approximation of the chi-square quantile with `df` degrees of freedom at
// upper tail probability 1e-3 (z = 3.0902); accurate to ~1% for df >= 3.
double chi2_critical_p001(int df) {
  const double z = 3.0902, k = df;
  double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Expected distribution computed here, independently of the sampler: softmax(logits / T),
// restricted to the top k, then the smallest top-p prefix, renormalized.
std::map<int64_t, double> expected_distribution(const at::Tensor& logits_V, double T, int64_t top_k,
                                                double top_p) {
  auto probs = at::softmax(logits_V.to(at::kDouble) / T, 0);
  auto [values, ids] = probs.sort(0, /*descending=*/true);
  int64_t n = top_k > 0 ? top_k : values.size(0);
  values = values.narrow(0, 0, n) / values.narrow(0, 0, n).sum();
  std::map<int64_t, double> dist;
  double mass = 0;
  for (int64_t i = 0; i < n && mass < top_p; ++i) {
    double p = values[i].item<double>();
    dist[ids[i].item<int64_t>()] = p;
    mass += p;
  }
  for (auto& [id, p] : dist) p /= mass;
  return dist;
}

// Draws N one-token samples (seeds 0..N-1) for a fixed context and compares the counts with
// the expected distribution: bins with expected count >= 5, the rest pooled. The test fails
// if the chi-square statistic exceeds the p = 0.001 quantile; with fixed seeds the outcome is
// deterministic. Tokens outside the allowed set must never be drawn.
TEST_F(EngineSampling, DistributionMatchesFilteredSoftmax) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  auto prompt = random_prompts({6}, 97, 5)[0];
  at::Tensor logits_V;
  {
    c10::InferenceMode guard;
    logits_V = engine->model()
                   .forward_logits(models::PackedBatch::from_documents({prompt}))
                   .select(0, static_cast<int64_t>(prompt.size()) - 1)
                   .to(at::kFloat);
  }
  struct Setting {
    double T;
    int64_t top_k;
    double top_p;
  };
  const int N = 3000;
  for (auto s : {Setting{0.7, 20, 1.0}, Setting{1.3, -1, 0.8}, Setting{1.0, 10, 0.7},
                 Setting{1.0, -1, 1.0}}) {
    SCOPED_TRACE("T=" + std::to_string(s.T) + " top_k=" + std::to_string(s.top_k) +
                 " top_p=" + std::to_string(s.top_p));
    std::vector<GenerateRequest> requests;
    for (int i = 0; i < N; ++i) {
      GenerateRequest r;
      r.input_ids = prompt;
      r.sampling.temperature = s.T;
      r.sampling.top_k = s.top_k;
      r.sampling.top_p = s.top_p;
      r.sampling.max_new_tokens = 1;
      r.sampling.seed = static_cast<uint64_t>(i);
      requests.push_back(r);
    }
    auto outputs = engine->generate(requests);
    std::map<int64_t, int> counts;
    for (const auto& o : outputs) counts[o.output_ids.at(0)]++;
    auto expected = expected_distribution(logits_V, s.T, s.top_k, s.top_p);
    for (const auto& [id, c] : counts) EXPECT_TRUE(expected.count(id)) << "token " << id;
    double chi2 = 0, pooled_expected = 0;
    int pooled_count = 0, bins = 0;
    for (const auto& [id, p] : expected) {
      double e = p * N;
      int c = counts.count(id) ? counts[id] : 0;
      if (e >= 5) {
        chi2 += (c - e) * (c - e) / e;
        ++bins;
      } else {
        pooled_expected += e;
        pooled_count += c;
      }
    }
    if (pooled_expected > 0) {
      chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
      ++bins;
    }
    ASSERT_GE(bins, 4);
    double critical = chi2_critical_p001(bins - 1);
    std::cout << "chi2 = " << chi2 << " over " << bins << " bins (critical " << critical << ")\n";
    EXPECT_LT(chi2, critical);
  }
}

TEST_F(EngineSampling, StopTokensStopStringsAndLength) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  auto prompt = random_prompts({5}, 97, 9)[0];
  auto base = engine->generate(greedy_requests({prompt}, 16))[0];
  ASSERT_EQ(base.output_ids.size(), 16u);
  // Stop token: the 5th greedy token ends generation there (included in the output).
  auto r = greedy_requests({prompt}, 16)[0];
  r.sampling.stop_token_ids = {base.output_ids[4]};
  auto stopped = engine->generate({r})[0];
  auto first = std::find(base.output_ids.begin(), base.output_ids.end(), base.output_ids[4]);
  size_t expect_len = static_cast<size_t>(first - base.output_ids.begin()) + 1;
  EXPECT_EQ(stopped.output_ids.size(), expect_len);
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.matched_stop_token, base.output_ids[4]);
  // Stop string: the decoded text of tokens 6..7.
  auto text = engine->tokenizer().decode({base.output_ids[6], base.output_ids[7]});
  auto rs = greedy_requests({prompt}, 16)[0];
  rs.sampling.stop = {text};
  auto by_string = engine->generate({rs})[0];
  EXPECT_EQ(by_string.finish_reason, FinishReason::kStop);
  EXPECT_EQ(by_string.matched_stop_string, text);
  EXPECT_LE(by_string.output_ids.size(), 8u);
  // Zero new tokens.
  auto zero = engine->generate(greedy_requests({prompt}, 0))[0];
  EXPECT_TRUE(zero.output_ids.empty());
  EXPECT_EQ(zero.finish_reason, FinishReason::kLength);
}

TEST_F(EngineSampling, AbortReturnsPartialOutput) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  auto prompt = random_prompts({5}, 97, 3)[0];
  std::atomic<int> tokens{0};
  std::promise<GenerateOutput> done;
  auto id = engine->submit(
      greedy_requests({prompt}, 400)[0],
      [&](RequestId, GenerateOutput out) { done.set_value(std::move(out)); },
      [&](RequestId, const std::vector<int64_t>& ids, const std::vector<float>&) {
        tokens += static_cast<int>(ids.size());
      });
  while (tokens < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(engine->abort(id));
  auto out = done.get_future().get();
  EXPECT_EQ(out.finish_reason, FinishReason::kAbort);
  EXPECT_GE(out.output_ids.size(), 3u);
  EXPECT_LT(out.output_ids.size(), 400u);
  EXPECT_EQ(out.output_ids.size(), out.output_logprobs.size());
  EXPECT_FALSE(engine->abort(id));
  EXPECT_EQ(engine->num_running(), 0);
}

TEST_F(EngineSampling, InvalidRequestsAreRejected) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  auto msg = furlong::testing::error_of([&] { engine->submit({}, {}); });
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  msg = furlong::testing::error_of([&] { engine->generate(greedy_requests({{1, 200}}, 4)); });
  EXPECT_NE(msg.find("input_ids[1] = 200"), std::string::npos) << msg;
  msg = furlong::testing::error_of([&] { engine->generate(greedy_requests({{1, 2}}, 600)); });
  EXPECT_NE(msg.find("context length"), std::string::npos) << msg;
}

// submit_all checks every request before it queues any: one bad request in a batch fails the
// call naming it, and no other request of the batch runs or calls back.
TEST_F(EngineSampling, SubmitAllQueuesAllOrNone) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  std::atomic<int> callbacks{0};
  auto batch_of = [&](const std::vector<std::vector<int64_t>>& prompts) {
    std::vector<Engine::Submission> batch;
    for (const auto& r : greedy_requests(prompts, 4))
      batch.push_back({r, [&](RequestId, GenerateOutput) { ++callbacks; }, {}});
    return batch;
  };
  auto msg = furlong::testing::error_of([&] {
    engine->submit_all(batch_of({{1, 2}, {3, 200}, {4, 5}}));
  });
  EXPECT_NE(msg.find("request 1 of 3 (none was queued)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input_ids[1] = 200"), std::string::npos) << msg;
  EXPECT_EQ(engine->num_running(), 0);
  auto ids = engine->submit_all(batch_of({{1, 2}, {3, 4}, {4, 5}}));
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_TRUE(ids[0] < ids[1] && ids[1] < ids[2]);
  const auto t0 = std::chrono::steady_clock::now();
  while (callbacks < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(callbacks.load(), 3) << "only the good batch's three requests call back";
}

}  // namespace
}  // namespace furlong::engine
