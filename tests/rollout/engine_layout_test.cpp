// The placement of colocated rollout engines (miles' --rollout-num-gpus and
// --rollout-num-gpus-per-engine) and how the collector splits a rollout over several engines:
// whole groups per engine, balanced by count, taken in group order whatever order the engines
// finish in. The engines here are fakes whose output is a function of the request alone (as the
// real engine's is, with the per-sample seed), so 1 and 2 engines must give the same rollout.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/test_util.h"
#include "core/error.h"
#include "data/prompt_dataset.h"
#include "data/sample_builder.h"
#include "rollout/engine_layout.h"
#include "rollout/rollout_collector.h"
#include "tokenizer/tokenizer.h"

namespace furlong::rollout {
namespace {

RolloutOptions colocated(std::optional<int64_t> gpus, int64_t per_engine) {
  RolloutOptions r;
  r.colocate = true;
  r.rollout_num_gpus = gpus;
  r.rollout_num_gpus_per_engine = per_engine;
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EngineLayout, ColocatedDefaultsToOneEnginePerRank) {
  const auto layout = colocated_engine_layout(colocated(std::nullopt, 1), 4);
  EXPECT_EQ(layout.engine_ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(layout.engine_on_rank(2), 2);
  EXPECT_NE(layout.describe(3).find("4 engines on ranks 0,1,2,3 of 4, 3 thread(s) each"),
            std::string::npos)
      << layout.describe(3);
}

TEST(EngineLayout, GroupsOfSeveralGpusRunOnTheirFirstRank) {
  const auto layout = colocated_engine_layout(colocated(std::nullopt, 2), 4);
  EXPECT_EQ(layout.engine_ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.engine_on_rank(1), -1);
  const auto line = layout.describe(1);
  EXPECT_NE(line.find("no tensor parallelism"), std::string::npos) << line;
  EXPECT_NE(line.find("rank(s) 1,3 train only"), std::string::npos) << line;
}

TEST(EngineLayout, FewerRolloutGpusLeaveTheLastRanksTrainingOnly) {
  const auto layout = colocated_engine_layout(colocated(2, 1), 4);
  EXPECT_EQ(layout.engine_ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.engine_on_rank(3), -1);
}

TEST(EngineLayout, EnginesOnAHostCountOnlyItsRanks) {
  const auto layout = colocated_engine_layout(colocated(std::nullopt, 2), 8);  // 0, 2, 4, 6
  EXPECT_EQ(layout.engines_on_host(/*rank=*/5, /*local_rank=*/1, /*local_world_size=*/4), 2);
  EXPECT_EQ(layout.engines_on_host(/*rank=*/1, /*local_rank=*/1, /*local_world_size=*/2), 1);
  EXPECT_EQ(layout.engines_on_host(/*rank=*/3, /*local_rank=*/3, /*local_world_size=*/8), 4);
}

TEST(EngineLayout, BadValuesNameTheFlag) {
  EXPECT_NE(error_of([] {
              colocated_engine_layout(colocated(3, 1), 2);
            }).find("--rollout-num-gpus 3 with --colocate must lie in [1, 2]"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { colocated_engine_layout(colocated(0, 1), 2); }).find("--rollout-num-gpus"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              colocated_engine_layout(colocated(3, 2), 4);
            }).find("--rollout-num-gpus-per-engine 2 must divide --rollout-num-gpus (3)"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              colocated_engine_layout(colocated(std::nullopt, 0), 2);
            }).find("--rollout-num-gpus-per-engine must be >= 1"),
            std::string::npos);
}

TEST(EngineLayout, DisaggregatedCountFollowsRolloutGpusWhenGiven) {
  RolloutOptions r;
  r.rollout_num_engines = 3;
  EXPECT_EQ(disaggregated_num_engines(r), 3);
  r.rollout_num_gpus = 8;
  r.rollout_num_gpus_per_engine = 2;
  EXPECT_EQ(disaggregated_num_engines(r), 4);
  r.rollout_num_gpus_per_engine = 3;
  EXPECT_NE(error_of([&] { disaggregated_num_engines(r); }).find("must divide"), std::string::npos);
}

TEST(EngineLayout, GroupsSplitIntoContiguousBlocksDifferingByAtMostOne) {
  EXPECT_EQ(split_groups_over_engines(5, 2), (std::vector<int64_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(split_groups_over_engines(4, 4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(split_groups_over_engines(2, 3), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(split_groups_over_engines(3, 1), (std::vector<int64_t>{0, 0, 0}));
}

// Fake engines: the output of a request depends on its prompt and seed only; dispatch() answers
// every request, in reverse submission order or in order (so groups finish out of order).
class FakeEngines : public RolloutEngines {
 public:
  FakeEngines(int64_t engines, bool reverse) : engines_(engines), reverse_(reverse) {}

  int64_t num_engines() const override { return engines_; }
  void submit(engine::GenerateRequest request, Done done) override {
    submit_to(0, std::move(request), std::move(done));
  }
  void submit_to(int64_t engine, engine::GenerateRequest request, Done done) override {
    queued_.push_back({engine, std::move(request), std::move(done)});
  }
  void dispatch() override {
    auto queued = std::move(queued_);
    queued_.clear();
    if (reverse_) std::reverse(queued.begin(), queued.end());
    for (auto& q : queued) {
      engine_of_prompt_[q.request.input_ids].insert(q.engine);
      ++requests_per_engine_[q.engine];
      engine::GenerateOutput out;
      const uint64_t seed = *q.request.sampling.seed;
      out.output_ids = {static_cast<int64_t>(seed % 10), static_cast<int64_t>(seed / 10 % 10)};
      out.output_logprobs = {-0.5f, -0.25f};
      out.finish_reason = engine::FinishReason::kLength;
      q.done(std::move(out));
    }
  }
  void abort_all() override {}
  int64_t sync_weights(const WeightSource&, int64_t, bool) override { return 0; }
  std::string describe() const override { return "fake"; }

  std::map<std::vector<int64_t>, std::set<int64_t>> engine_of_prompt_;
  std::map<int64_t, int64_t> requests_per_engine_;

 private:
  struct Queued {
    int64_t engine;
    engine::GenerateRequest request;
    Done done;
  };
  int64_t engines_;
  bool reverse_;
  std::vector<Queued> queued_;
};

struct Rollout {
  std::vector<rl::Sample> samples;
  std::map<std::vector<int64_t>, std::set<int64_t>> engine_of_prompt;
  std::map<int64_t, int64_t> requests_per_engine;
};

// One rollout of `groups` groups x 4 samples over 8 distinct prompts; reward 1 when the first
// response token is even. With `filter`, groups with equal rewards are dropped and 8 groups are
// generated to keep `groups`.
Rollout collect(int64_t engines, bool reverse, int64_t groups, bool filter) {
  const auto tok = tokenizer::Tokenizer::from_directory(
      (testing::source_dir() / "examples/tokenizers/arith").string());
  std::vector<data::Prompt> prompts;
  for (int64_t p = 0; p < 8; ++p) {
    data::Prompt prompt;
    prompt.where = "test:" + std::to_string(p);
    prompt.ids = {p, (p + 3) % 10};
    prompts.push_back(prompt);
  }
  data::PromptDataset dataset(prompts, /*shuffle=*/false, 1);
  data::RolloutDataSource source(dataset, 4);
  RolloutConfig o;
  o.data.rollout_batch_size = groups;
  o.data.n_samples_per_prompt = 4;
  o.rollout.rollout_max_response_len = 2;
  if (filter) {
    o.rollout.over_sampling_batch_size = 8;
    o.rollout.dynamic_sampling_filter_path = "check_reward_nonzero_std";
  }
  FakeEngines fake(engines, reverse);
  RolloutCollector collector(o, fake, source, tok, [](std::vector<rl::Sample*>& samples) {
    for (auto* s : samples) s->raw_reward = s->tokens.back() % 2 == 0 ? 1.0 : 0.0;
  });
  Rollout r;
  r.samples = collector.collect().samples;
  r.engine_of_prompt = fake.engine_of_prompt_;
  r.requests_per_engine = fake.requests_per_engine_;
  return r;
}

void expect_same_samples(const std::vector<rl::Sample>& a, const std::vector<rl::Sample>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index) << i;
    EXPECT_EQ(a[i].group_index, b[i].group_index) << i;
    EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    EXPECT_EQ(a[i].rollout_log_probs, b[i].rollout_log_probs) << i;
    EXPECT_EQ(a[i].raw_reward, b[i].raw_reward) << i;
  }
}

TEST(SplitRollout, WholeGroupsGoToOneEngineEachAndTheCountsBalance) {
  const auto r = collect(2, /*reverse=*/true, 5, /*filter=*/false);
  ASSERT_EQ(r.samples.size(), 20u);
  for (const auto& [prompt, engines] : r.engine_of_prompt) EXPECT_EQ(engines.size(), 1u);
  // 5 groups of 4 over 2 engines: 3 groups, then 2.
  EXPECT_EQ(r.requests_per_engine.at(0), 12);
  EXPECT_EQ(r.requests_per_engine.at(1), 8);
}

TEST(SplitRollout, TwoEnginesGiveTheOneEngineRolloutInGroupOrder) {
  const auto one = collect(1, /*reverse=*/true, 5, /*filter=*/false);
  const auto two = collect(2, /*reverse=*/true, 5, /*filter=*/false);
  expect_same_samples(one.samples, two.samples);
  for (size_t i = 1; i < two.samples.size(); ++i) {
    EXPECT_LT(two.samples[i - 1].index, two.samples[i].index);
  }
}

TEST(SplitRollout, WithAFilterTheKeptGroupsDoNotDependOnFinishOrder) {
  const auto forward = collect(2, /*reverse=*/false, 3, /*filter=*/true);
  const auto backward = collect(2, /*reverse=*/true, 3, /*filter=*/true);
  ASSERT_EQ(forward.samples.size(), 12u);
  expect_same_samples(forward.samples, backward.samples);
}

}  // namespace
}  // namespace furlong::rollout
