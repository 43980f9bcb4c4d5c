// Every validation rule of `furlong train` has a test that checks its message says what is
// wrong and what to do; plus the launch paths (torchrun --no-python) work end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include "backend/batching.h"
#include "common/test_util.h"
#include "common/train_test_util.h"
#include "core/files.h"
#include "train/options.h"

namespace furlong::train {
using namespace furlong::backend;  // NOLINT: the tests of the layer below
namespace {

namespace fs = std::filesystem;
using furlong::testing::error_of;

TrainOptions valid() {
  TrainOptions o;
  o.model.hf_checkpoint = "m";
  o.batch.loss_type = LossType::kSftLoss;
  return o;
}

void expect_rejected(const TrainOptions& o, int world, const std::vector<std::string>& parts) {
  auto msg = error_of([&] { validate_options(o, world); });
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
}

TEST(TrainValidation, EachRuleExplainsWhatIsWrongAndWhatToDo) {
  EXPECT_NO_THROW(validate_options(valid(), 4));
  auto o = valid();
  o.parallel.dp_replicate_size = 3;
  expect_rejected(
      o, 4, {"--dp-replicate-size 3 does not divide the world size 4", "choose a divisor of 4"});
  o = valid();
  o.parallel.dp_replicate_size = 0;
  expect_rejected(o, 4, {"--dp-replicate-size must be at least 1"});
  o = valid();
  o.parallel.context_parallel_size = 2;
  expect_rejected(o, 4,
                  {"Context parallelism is not supported for the FSDP backend",
                   "--context-parallel-size 2", "Use --context-parallel-size 1"});
  // The flag table parses --train-backend once, into an enum; other names never get further.
  auto backend_msg = error_of([] { parse_train_backend("megatron"); });
  for (const char* part : {"--train-backend megatron", "fsdp"}) {
    EXPECT_NE(backend_msg.find(part), std::string::npos) << backend_msg;
  }
  o = valid();
  o.parallel.distributed_heartbeat_timeout = -1;
  expect_rejected(o, 4, {"--distributed-heartbeat-timeout must be between 0 (off)", "got -1"});
  o = valid();
  o.rollout.rm_max_retries = int64_t{1} << 40;
  expect_rejected(o, 4, {"--rm-max-retries must be between 0 and 1000", "got 1099511627776"});
  o = valid();
  o.batch.use_dynamic_batch_size = true;
  expect_rejected(o, 4, {"--use-dynamic-batch-size requires --max-tokens-per-gpu"});
  o = valid();
  o.checkpoint.save_interval = 5;
  expect_rejected(o, 4, {"--save-interval requires --save"});
  o = valid();
  o.batch.global_batch_size = 6;
  expect_rejected(
      o, 4, {"--global-batch-size 6 must be a positive multiple of the data-parallel size 4"});
  o = valid();
  o.precision.fp16 = true;
  o.precision.compute_dtype = ComputeDtype::kFloat32;
  expect_rejected(o, 4, {"--fp16 and --compute-dtype float32"});
  // --loss-type is parsed into an enum once, by the flag table.
  auto msg = error_of([] { parse_loss_type("value_loss"); });
  EXPECT_NE(msg.find("--loss-type value_loss is not supported"), std::string::npos) << msg;
  // So is --compute-dtype.
  msg = error_of([] { parse_compute_dtype_choice("int8"); });
  EXPECT_NE(msg.find("--compute-dtype: invalid choice 'int8' (choose from auto, bfloat16, "
                     "float16, float32)"),
            std::string::npos)
      << msg;
}

TEST(TrainValidation, DynamicBatchingBalancesTokensAndAgreesAcrossRanks) {
  // First-fit bins of capacity 10 for lengths {6, 6, 3, 3, 2}: 3 bins.
  EXPECT_EQ(first_fit_bins({6, 6, 3, 3, 2}, 10), 3);
  auto groups = karmarkar_karp({6, 6, 3, 3, 2}, 3);
  ASSERT_EQ(groups.size(), 3u);
  std::vector<int64_t> sums;
  size_t items = 0;
  for (const auto& g : groups) {
    int64_t s = 0;
    for (size_t i : g) s += std::vector<int64_t>{6, 6, 3, 3, 2}[i];
    sums.push_back(s);
    items += g.size();
  }
  EXPECT_EQ(items, 5u);
  // The best possible split of {6, 6, 3, 3, 2} into 3 groups has sums {6, 6, 8}: spread 2.
  EXPECT_LE(
      *std::max_element(sums.begin(), sums.end()) - *std::min_element(sums.begin(), sums.end()), 2);
  // The micro-batch count is the maximum over ranks (here: a callback that says 4).
  auto plan = plan_batches({5, 5, 5, 5}, 8, 2,
                           {.global_batch_size = 8, .dynamic = true, .max_tokens_per_gpu = 100},
                           [](int64_t) { return int64_t{4}; });
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].size(), 4u);
  // Leftover samples beyond whole global batches are dropped, the same on every rank.
  auto leftover = plan_batches({1, 1, 1}, 7, 2, {.global_batch_size = 4, .micro_batch_size = 1},
                               [](int64_t v) { return v; });
  EXPECT_EQ(leftover.size(), 1u);
}

TEST(TrainValidation, SharedPromptsKeepAGroupInOneMicroBatch) {
  // 4 prompt groups of 4 samples (prompt 10, response 5), interleaved as ranks receive them.
  std::vector<int64_t> lengths(16, 15);
  SharedPrompts shared;
  for (int64_t i = 0; i < 16; ++i) {
    shared.prompt_id.push_back(i % 4);
    shared.prompt_length.push_back(10);
  }
  EXPECT_EQ(prompt_ids({{1, 2}, {3}, {1, 2}, {1}}), (std::vector<int64_t>{0, 1, 0, 2}));
  const BatchingOptions o{.global_batch_size = 16, .dynamic = true, .max_tokens_per_gpu = 30};
  auto identity = [](int64_t v) { return v; };
  // Whole samples: 16 x 15 tokens in bins of 30, two samples each.
  EXPECT_EQ(plan_batches(lengths, 16, 1, o, identity)[0].size(), 8u);
  // Shared: a group is 10 + 4 x 5 = 30 tokens, so each micro-batch is one whole group.
  auto plan = plan_batches(lengths, 16, 1, o, identity, &shared);
  ASSERT_EQ(plan[0].size(), 4u);
  for (const auto& micro : plan[0]) {
    ASSERT_EQ(micro.size(), 4u);
    for (size_t i : micro) EXPECT_EQ(shared.prompt_id[i], shared.prompt_id[micro[0]]);
  }
  // A group over the budget is cut: at 20 tokens, 10 + 2 x 5 per piece, 8 pieces.
  auto cut = plan_batches(lengths, 16, 1,
                          {.global_batch_size = 16, .dynamic = true, .max_tokens_per_gpu = 20},
                          identity, &shared);
  EXPECT_EQ(cut[0].size(), 8u);
}

TEST(TrainCli, RejectsBadConfigurationBeforeBuildingAnything) {
  auto dir = furlong::testing::scratch_dir();
  testing::write_model(dir / "m", testing::tiny_config(false), at::kFloat, 1);
  testing::write_sft_data(dir / "d.jsonl", 8, 61, 1);
  auto bin = furlong::testing::shell_quote(furlong::testing::furlong_binary().string());
  auto base = bin + " train --loss-type sft --hf-checkpoint " +
              furlong::testing::shell_quote((dir / "m").string()) + " --prompt-data " +
              furlong::testing::shell_quote((dir / "d.jsonl").string()) + " --global-batch-size 8";
  auto r = furlong::testing::run_command(base + " --context-parallel-size 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("Context parallelism is not supported for the FSDP backend"),
            std::string::npos)
      << r.output;
  r = furlong::testing::run_command(base + " --lr-decay-style cosin");
  EXPECT_NE(r.output.find("invalid choice 'cosin'"), std::string::npos) << r.output;
  r = furlong::testing::run_command(base + " --optimizer sgd");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("invalid choice 'sgd'"), std::string::npos) << r.output;
  // RL (policy_loss) without a reward is refused before any model is built.
  r = furlong::testing::run_command(base + " --loss-type policy_loss --rollout-batch-size 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("RL needs a reward: set --rm-type"), std::string::npos) << r.output;
}

TEST(TrainCli, RunsUnderTorchrunNoPython) {
  auto dir = furlong::testing::scratch_dir();
  testing::write_model(dir / "m", testing::tiny_config(false), at::kFloat, 1);
  testing::write_sft_data(dir / "d.jsonl", 16, 61, 1);
  auto q = [](const fs::path& p) { return furlong::testing::shell_quote(p.string()); };
  auto r = furlong::testing::run_command(
      q(furlong::testing::python()) + " -m torch.distributed.run --no-python --nproc-per-node 2 " +
      q(furlong::testing::furlong_binary()) + " train --loss-type sft --hf-checkpoint " +
      q(dir / "m") + " --prompt-data " + q(dir / "d.jsonl") +
      " --global-batch-size 8 --num-rollout 2 --metrics-file " + q(dir / "metrics.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 rank(s)"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir / "metrics.jsonl").find("train/loss") != std::string::npos, true);
}

}  // namespace
}  // namespace furlong::train
