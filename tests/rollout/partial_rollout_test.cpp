// Partial rollouts (--partial-rollout) on a tiny model with the in-process engine: a seeded
// request continued from its prompt plus its first k tokens draws what the uninterrupted
// request drew; through RolloutCollector, groups cut short at the end of a rollout go to the
// buffer and continue in the next rollout under a new weight version, with the tokens they
// would have had in one piece, per-token weight versions, and (with
// --mask-offpolicy-in-partial-rollout) loss mask 0 on the older-weight prefix.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>

#include "common/test_util.h"
#include "data/prompt_dataset.h"
#include "data/sample_builder.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "rollout/rollout_collector.h"
#include "rollout/rollout_engines.h"
#include "tokenizer/tokenizer.h"

namespace furlong::rollout {
namespace {

namespace fs = std::filesystem;
using engine::testing::random_prompts;
using engine::testing::small_engine_options;

constexpr int64_t kMaxResponse = 12;  // --rollout-max-response-len
constexpr int64_t kCutAfter = 5;      // tokens a cut-short request keeps

const fs::path& model_dir() {
  static const fs::path dir = [] {
    auto d = furlong::testing::scratch_dir() / "partial_rollout_model";
    engine::testing::write_tiny_model(d, engine::testing::tiny_config("qwen3"), 41, "float32");
    return d;
  }();
  return dir;
}

// Sampled at temperature 1 with a seed, as the collector's requests are.
engine::GenerateRequest seeded(std::vector<int64_t> input, uint64_t seed, int64_t max_new) {
  engine::GenerateRequest r;
  r.input_ids = std::move(input);
  r.sampling.temperature = 1.0;
  r.sampling.ignore_eos = true;  // every request runs to its budget
  r.sampling.max_new_tokens = max_new;
  r.sampling.seed = seed;
  return r;
}

TEST(PartialRollout, EngineContinuationDrawsTheUninterruptedTokens) {
  auto engine = engine::Engine::load(model_dir().string(), small_engine_options());
  for (const auto& prompt : random_prompts({4, 9, 17}, 97, 5)) {
    const auto whole = engine->generate({seeded(prompt, 77, kMaxResponse)})[0];
    ASSERT_EQ(static_cast<int64_t>(whole.output_ids.size()), kMaxResponse);
    const auto head = engine->generate({seeded(prompt, 77, kCutAfter)})[0];
    auto input = prompt;
    input.insert(input.end(), head.output_ids.begin(), head.output_ids.end());
    const auto tail = engine->generate({seeded(input, 77, kMaxResponse - kCutAfter)})[0];
    auto joined = head.output_ids;
    joined.insert(joined.end(), tail.output_ids.begin(), tail.output_ids.end());
    EXPECT_EQ(joined, whole.output_ids);
    // Another seed draws something else (the test can tell continuations apart).
    EXPECT_NE(engine->generate({seeded(prompt, 78, kMaxResponse)})[0].output_ids, whole.output_ids);
  }
}

// Engines over one in-process engine that run every request to completion, except that while
// `cut` is set each request after the first `whole_requests` of a round stops after kCutAfter
// tokens and reports finish reason abort (what the collector sees of an abort at that point).
// Each request's seed, first input (the prompt) and final tokens are recorded.
class CuttingEngines : public RolloutEngines {
 public:
  explicit CuttingEngines(engine::Engine& engine) : engine_(engine) {}
  void submit(engine::GenerateRequest request, Done done) override {
    queued_.push_back({std::move(request), std::move(done)});
  }
  void dispatch() override {
    auto queued = std::move(queued_);
    queued_.clear();
    for (size_t i = 0; i < queued.size(); ++i) {
      auto request = queued[i].request;
      const bool cut_short = cut && static_cast<int64_t>(i) >= whole_requests &&
                             request.sampling.max_new_tokens > kCutAfter;
      if (cut_short) request.sampling.max_new_tokens = kCutAfter;
      auto out = engine_.generate({request})[0];
      if (cut_short) out.finish_reason = engine::FinishReason::kAbort;
      const uint64_t seed = *request.sampling.seed;
      first_input.try_emplace(seed, request.input_ids);
      auto final_tokens = request.input_ids;
      final_tokens.insert(final_tokens.end(), out.output_ids.begin(), out.output_ids.end());
      seed_of_tokens[final_tokens] = seed;
      ++requests;
      queued[i].done(std::move(out));
    }
  }
  void abort_all() override {}
  int64_t sync_weights(const WeightSource&, int64_t, bool) override { return 0; }
  std::string describe() const override { return "in-process, cutting"; }

  bool cut = false;
  int64_t whole_requests = 0;
  int64_t requests = 0;
  std::map<uint64_t, std::vector<int64_t>> first_input;
  std::map<std::vector<int64_t>, uint64_t> seed_of_tokens;

 private:
  struct Queued {
    engine::GenerateRequest request;
    Done done;
  };
  engine::Engine& engine_;
  std::vector<Queued> queued_;
};

// One collector with --partial-rollout over 6 prompts x 2 samples: 1 group kept per rollout
// out of 3 generated (--over-sampling-batch-size 3).
struct PartialFixture {
  explicit PartialFixture(bool mask_offpolicy, std::optional<int64_t> max_staleness = {}) {
    for (const auto& ids : random_prompts({3, 6, 4, 8, 5, 7}, 97, 11)) {
      data::Prompt p;
      p.where = "test:" + std::to_string(prompts.size());
      p.ids = ids;
      prompts.push_back(p);
    }
    dataset = std::make_unique<data::PromptDataset>(prompts, /*shuffle=*/false, 1);
    source = std::make_unique<data::RolloutDataSource>(*dataset, 2);
    options.engine.hf_checkpoint = model_dir().string();
    options.data.rollout_batch_size = 1;
    options.data.n_samples_per_prompt = 2;
    options.rollout.over_sampling_batch_size = 3;
    options.rollout.rollout_max_response_len = kMaxResponse;
    options.rollout.partial_rollout = true;
    options.rollout.mask_offpolicy_in_partial_rollout = mask_offpolicy;
    options.rollout.max_weight_staleness = max_staleness;
    engine = engine::Engine::load(model_dir().string(), small_engine_options());
    engines = std::make_unique<CuttingEngines>(*engine);
    tokenizer = std::make_unique<tokenizer::Tokenizer>(
        tokenizer::Tokenizer::from_directory(model_dir().string()));
    collector = std::make_unique<RolloutCollector>(
        options, *engines, *source, *tokenizer, [](std::vector<rl::Sample*>& s) {
          for (auto* sample : s) sample->raw_reward = static_cast<double>(sample->index % 2);
        });
  }

  // Rollout 0 with every group after the first cut short, then weight version 1.
  RolloutResult cut_rollout_then_new_version() {
    engines->cut = true;
    engines->whole_requests = 2;
    auto result = collector->collect(0);
    engines->cut = false;
    engine->update_weights_from_tensors({}, 1);  // the same values, a new version
    collector->set_engine_weight_version(1);
    return result;
  }

  // The tokens `s`'s request would have produced in one piece under the current weights.
  std::vector<int64_t> uninterrupted(const rl::Sample& s) {
    const auto it = engines->seed_of_tokens.find(s.tokens);
    EXPECT_NE(it, engines->seed_of_tokens.end()) << "sample " << s.index;
    if (it == engines->seed_of_tokens.end()) return {};
    auto request = seeded(engines->first_input.at(it->second), it->second, kMaxResponse);
    request.sampling.ignore_eos = false;  // as the collector asks
    auto tokens = request.input_ids;
    const auto out = engine->generate({request})[0];
    tokens.insert(tokens.end(), out.output_ids.begin(), out.output_ids.end());
    return tokens;
  }

  std::vector<data::Prompt> prompts;
  std::unique_ptr<data::PromptDataset> dataset;
  std::unique_ptr<data::RolloutDataSource> source;
  RolloutConfig options;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<CuttingEngines> engines;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<RolloutCollector> collector;
};

TEST(PartialRollout, CutGroupsWaitInTheBufferWithTheirTokens) {
  PartialFixture f(/*mask_offpolicy=*/false);
  const auto first = f.cut_rollout_then_new_version();
  ASSERT_EQ(first.samples.size(), 2u);  // group 0, whole
  for (const auto& s : first.samples) {
    EXPECT_EQ(s.group_index, 0);
    EXPECT_EQ(s.response_length, kMaxResponse);
    EXPECT_EQ(s.weight_versions, std::vector<int64_t>(kMaxResponse, 0));
  }
  auto* buffer = f.collector->partial_buffer();
  ASSERT_NE(buffer, nullptr);
  ASSERT_EQ(buffer->size(), 2);  // groups 1 and 2, cut short
  for (const auto& g : buffer->groups()) {
    for (const auto& s : g) {
      EXPECT_EQ(s.status, rl::SampleStatus::kAborted);
      EXPECT_EQ(s.response_length, kCutAfter);
      EXPECT_EQ(s.rollout_log_probs.size(), static_cast<size_t>(kCutAfter));
      EXPECT_EQ(s.weight_versions, std::vector<int64_t>(kCutAfter, 0));
      EXPECT_EQ(s.metadata.value("start_rollout_id", -1), 0);
    }
  }
  EXPECT_EQ(first.metrics.at("rollout/partial/buffered_samples"), 4.0);
  EXPECT_EQ(first.metrics.at("rollout/partial/buffered_tokens"), 4.0 * kCutAfter);
}

TEST(PartialRollout, ContinuedSamplesHaveTheirOnePieceTokensAndBothVersions) {
  PartialFixture f(/*mask_offpolicy=*/false);
  f.cut_rollout_then_new_version();
  const int64_t requests_before = f.engines->requests;
  const auto second = f.collector->collect(1);
  // Buffered groups 1 and 2 (4 samples) continue, fresh group 3 starts: 6 requests.
  EXPECT_EQ(f.engines->requests - requests_before, 6);
  EXPECT_EQ(second.metrics.at("rollout/partial/resumed_samples"), 4.0);
  ASSERT_EQ(second.samples.size(), 2u);
  std::vector<int64_t> versions(kCutAfter, 0);
  versions.resize(kMaxResponse, 1);
  for (const auto& s : second.samples) {
    SCOPED_TRACE("sample " + std::to_string(s.index));
    EXPECT_EQ(s.group_index, 1);  // the oldest buffered group comes first
    EXPECT_NO_THROW(rl::validate_sample(s, "continued sample"));
    EXPECT_EQ(s.tokens, f.uninterrupted(s));
    EXPECT_EQ(s.weight_versions, versions);
    EXPECT_EQ(s.loss_mask, std::vector<float>(kMaxResponse, 1.0f));
    EXPECT_EQ(s.rollout_log_probs.size(), static_cast<size_t>(kMaxResponse));
  }
  EXPECT_EQ(second.metrics.at("rollout/weight_version/min"), 0.0);
  EXPECT_EQ(second.metrics.at("rollout/weight_version/max"), 1.0);
  EXPECT_EQ(second.metrics.at("rollout/weight_version/mixed_ratio"), 1.0);
  // Groups 2 and 3 finished after the target: buffered whole, served next without a request.
  const int64_t requests_after = f.engines->requests;
  const auto third = f.collector->collect(2);
  ASSERT_EQ(third.samples.size(), 2u);
  EXPECT_EQ(third.samples.front().group_index, 2);
  EXPECT_EQ(third.samples.front().response_length, kMaxResponse);
  EXPECT_EQ(f.engines->requests - requests_after, 2);  // only the fresh group 4
}

TEST(PartialRollout, MaskOffpolicyZeroesTheOlderWeightPrefix) {
  PartialFixture f(/*mask_offpolicy=*/true);
  f.cut_rollout_then_new_version();
  const auto second = f.collector->collect(1);
  ASSERT_EQ(second.samples.size(), 2u);
  std::vector<float> mask(kCutAfter, 0.0f);
  mask.resize(kMaxResponse, 1.0f);
  for (const auto& s : second.samples) {
    EXPECT_EQ(s.loss_mask, mask);
    EXPECT_EQ(s.mask_sum(), static_cast<double>(kMaxResponse - kCutAfter));
    EXPECT_EQ(s.tokens, f.uninterrupted(s));
  }
}

TEST(PartialRollout, TooStaleSamplesStartOver) {
  PartialFixture f(/*mask_offpolicy=*/false, /*max_staleness=*/0);
  f.cut_rollout_then_new_version();
  const auto second = f.collector->collect(1);
  EXPECT_EQ(second.metrics.at("rollout/partial/restarted_samples"), 4.0);
  EXPECT_EQ(second.metrics.count("rollout/partial/resumed_samples"), 0u);
  for (const auto& s : second.samples) {
    EXPECT_EQ(s.weight_versions, std::vector<int64_t>(kMaxResponse, 1));
    EXPECT_EQ(s.tokens, f.uninterrupted(s));
  }
}

}  // namespace
}  // namespace furlong::rollout
