// End-to-end RL runs of `furlong train` on a tiny random Qwen3 and a synthetic task: for a
// prompt "a+b=" answer "1" if a + b >= 5 else "0", graded by exact match (special tokens left
// out of the text), with the arithmetic-only tokenizer of examples/tokenizers/arith (20 tokens,
// 32 embedding rows). The random model answers correctly with probability ~0.03 per sample;
// GRPO must raise the mean reward by far more than chance allows.
//
// Statistics: the first and last K rollouts each hold K * 64 samples. Under the null hypothesis
// "no improvement" the two success rates are equal; the two-proportion z statistic is then
// approximately standard normal, and we require z > 5 (one-sided p < 3e-7), which random
// fluctuation cannot produce. Each run is seeded, so the test is deterministic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/arith_task.h"
#include "common/rl_flags.h"
#include "common/test_util.h"
#include "core/json_util.h"

namespace furlong::testing {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  fs::path root;
  fs::path model;
  fs::path data;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.root = fresh_process_dir("e2e", "rl_fixture");
    x.model = init_tiny_model(x.root, "model");
    x.data = x.root / "prompts.jsonl";
    write_arith_rows(x.data, threshold_row);
    return x;
  }();
  return f;
}

std::vector<std::string> grpo_flags(const fs::path& dir, int num_rollout) {
  const auto& f = fixture();
  return threshold_grpo_flags(f.model, f.data, num_rollout)
      .add({"--rollout-temperature", "1.0"})
      .add(tiny_trainer_flags())
      .add({"--metrics-file", (dir / "metrics.jsonl").string()});
}

std::string command_line(const std::vector<std::string>& args) {
  std::string cmd;
  for (const auto& a : args) cmd += shell_quote(a) + " ";
  return cmd;
}

CommandResult run_train(const std::vector<std::string>& flags, int nproc = 1) {
  std::vector<std::string> args = {furlong_binary().string()};
  if (nproc > 1) {
    for (const char* a : {"launch", "--nproc-per-node"}) args.push_back(a);
    args.push_back(std::to_string(nproc));
    args.push_back("--");
    args.push_back(furlong_binary().string());
  }
  args.push_back("train");
  args.insert(args.end(), flags.begin(), flags.end());
  return run_command(command_line(args) + " 2>&1");
}

std::vector<Json> read_rows(const fs::path& file) {
  std::vector<Json> rows;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

double value(const Json& row, const std::string& key) {
  EXPECT_TRUE(row.contains(key)) << key << " missing in " << row.dump();
  return row.contains(key) && row[key].is_number() ? row[key].get<double>() : NAN;
}

// The one-sided two-proportion z statistic of "last K rollouts beat the first K".
double improvement_z(const std::vector<Json>& rows, int k, int samples_per_rollout) {
  double first = 0, last = 0;
  for (int i = 0; i < k; ++i) {
    first += value(rows[static_cast<size_t>(i)], "rollout/raw_reward");
    last += value(rows[rows.size() - 1 - static_cast<size_t>(i)], "rollout/raw_reward");
  }
  const double n = static_cast<double>(k * samples_per_rollout);
  const double p1 = first / k, p2 = last / k, p = (p1 + p2) / 2;
  const double se = std::sqrt(std::max(p * (1 - p) * 2 / n, 1e-12));
  return (p2 - p1) / se;
}

void expect_on_policy_first_step(const std::vector<Json>& rows) {
  for (const auto& row : rows) {
    // One optimizer step per rollout: the old log-probs come from the same weights, packed the
    // same way, so the ratio is exactly 1.
    EXPECT_EQ(value(row, "train/ppo_kl"), 0.0) << "step " << row["step"];
    // Engine vs trainer log-probs on the same tokens (fp32, a mean over tokens, so at most the
    // per-token bound): the same code on the same weights, packed differently (GEMM blocking),
    // each within the forward budget of the exact logits (tests/common/tolerances.h): 2 layers,
    // 20 reductions of <= 128 terms, gamma_prob(2560) = 1.8e-5 of the logits' absolute scale
    // max_j sum_k |h_k W_jk| (~0.8 at init: 64 dims, |h| ~ 0.8, |W| ~ 0.016; the bound allows
    // it to grow to 1.4 during the run, an assumption: the test cannot see the weights); a
    // log-prob moves by twice a logit's error, for two computations: 4 * 1.8e-5 * 1.4 = 1e-4.
    EXPECT_LE(value(row, "train/train_rollout_logprob_abs_diff"), 1e-4) << "step " << row["step"];
  }
}

TEST(RlEndToEnd, ColocatedGrpoRaisesReward) {
  auto dir = scratch_dir();
  auto flags = grpo_flags(dir, 16);
  flags.push_back("--colocate");
  flags.push_back("--check-weight-update-equal");
  // Buckets of ~64 KiB: the 300 KB model travels in several, the digest spans them all.
  flags.insert(flags.end(), {"--update-weight-buffer-size", "65536"});
  flags.insert(flags.end(), {"--report", (dir / "report.html").string()});
  // Eval at the start and every 5 rollouts, greedy, 2 samples per prompt.
  flags.insert(flags.end(), {"--eval-interval", "5", "--eval-prompt-data", fixture().data.string(),
                             "--n-samples-per-eval-prompt", "2", "--eval-temperature", "0"});
  auto r = run_train(flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_rows(dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 16u) << r.output;
  expect_on_policy_first_step(rows);
  // Eval rows: the baseline at rollout 0, then after rollouts 4, 9, 14 (eval follows the sync).
  for (size_t i = 0; i < rows.size(); ++i) {
    const bool due = i == 0 || (i + 1) % 5 == 0;
    EXPECT_EQ(rows[i].contains("eval/prompts"), due) << "rollout " << i;
    if (due) {
      EXPECT_GE(value(rows[i], "eval/prompts"), 0.0);
      EXPECT_LE(value(rows[i], "eval/prompts"), 1.0);
      EXPECT_TRUE(rows[i].contains("eval/prompts-pass@2")) << rows[i].dump();
    }
  }
  const double z = improvement_z(rows, 4, 64);
  EXPECT_GT(z, 5.0) << "first/last rewards: " << rows.front()["rollout/raw_reward"] << " / "
                    << rows.back()["rollout/raw_reward"];
  std::ifstream html(dir / "report.html");
  std::string text((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
}

// Colocated GRPO on a tiny Qwen3.5 (3 Gated DeltaNet layers and one gated-attention layer;
// the engine keeps each sequence's DeltaNet state): on-policy ratios of exactly 1, engine and
// trainer log-probs within the fp32 bound, and the reward rises. Bound on |dlogp| as in
// expect_on_policy_first_step, for this model: 4 layers of 16 reductions (+2) of <= 128 terms
// (D = 64, F = 128, 2 N H = 128; tests/models/qwen3_5_test.cpp counts them): gamma_prob(8448)
// = 3.3e-5 of the logits' scale (<= 1.4 assumed, as there), twice for two computations and twice
// for a log-prob: 1.8e-4.
TEST(RlEndToEnd, Qwen35ColocatedGrpoRaisesRewardOnPolicy) {
  auto dir = scratch_dir();
  Json config = arith_qwen3_config();
  config.merge_patch({{"architectures", {"Qwen3_5ForCausalLM"}},
                      {"model_type", "qwen3_5_text"},
                      {"num_hidden_layers", 4},
                      {"linear_num_key_heads", 2},
                      {"linear_num_value_heads", 4},
                      {"linear_key_head_dim", 16},
                      {"linear_value_head_dim", 16}});
  auto model = init_tiny_model(dir, "qwen3_5", 7, "float32", config);
  auto flags = threshold_grpo_flags(model, fixture().data, 16)
                   .add({"--rollout-temperature", "1.0"})
                   .add(tiny_trainer_flags())
                   .add({"--colocate", "--check-weight-update-equal", "--metrics-file",
                         (dir / "metrics.jsonl").string()});
  auto r = run_train(flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_rows(dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 16u) << r.output;
  for (const auto& row : rows) {
    EXPECT_EQ(value(row, "train/ppo_kl"), 0.0) << "step " << row["step"];
    EXPECT_LE(value(row, "train/train_rollout_logprob_abs_diff"), 1.8e-4) << "step " << row["step"];
  }
  EXPECT_GT(improvement_z(rows, 4, 64), 5.0);
}

TEST(RlEndToEnd, DisaggregatedGrpoRaisesRewardOnTwoRanks) {
  auto dir = scratch_dir();
  auto flags = grpo_flags(dir, 16);
  flags.insert(flags.end(), {"--rollout-num-engines", "1", "--check-weight-update-equal",
                             "--update-weight-buffer-size", "65536"});
  auto r = run_train(flags, /*nproc=*/2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_rows(dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 16u) << r.output;
  expect_on_policy_first_step(rows);
  EXPECT_GT(improvement_z(rows, 4, 64), 5.0);
}

TEST(RlEndToEnd, ResumedRunContinuesTheSameCurve) {
  auto full_dir = scratch_dir() / "full";
  auto part_dir = scratch_dir() / "part";
  fs::create_directories(full_dir);
  fs::create_directories(part_dir);
  auto full = grpo_flags(full_dir, 6);
  full.push_back("--colocate");
  auto r = run_train(full);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto part = grpo_flags(part_dir, 6);
  part.insert(part.end(), {"--colocate", "--save", (part_dir / "ckpt").string(), "--load",
                           (part_dir / "ckpt").string(), "--save-interval", "3"});
  auto first = part;
  first.insert(first.end(), {"--debug-exit-after-rollout", "3"});
  r = run_train(first);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_train(part);  // resumes at rollout 3
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resum"), std::string::npos) << r.output;

  auto want = read_rows(full_dir / "metrics.jsonl");
  auto got = read_rows(part_dir / "metrics.jsonl");
  ASSERT_EQ(want.size(), 6u);
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    for (const char* key : {"rollout/raw_reward", "rollout/response_len/mean", "train/loss",
                            "train/pg_loss", "train/grad_norm"}) {
      EXPECT_EQ(value(got[i], key), value(want[i], key)) << key << " at rollout " << i;
    }
  }
}

// --old-logprobs auto (the default) skips the old-policy pass of a one-step rollout and takes
// the step's own forward instead; the update must be the one the pass gives, bit for bit.
TEST(RlEndToEnd, SkippedOldPolicyPassTrainsAsTheRecomputedOne) {
  std::map<std::string, std::vector<Json>> runs;
  for (const char* mode : {"auto", "recompute"}) {
    auto dir = scratch_dir() / (std::string("old_") + mode);
    fs::create_directories(dir);
    auto flags = grpo_flags(dir, 4);
    flags.insert(flags.end(), {"--colocate", "--old-logprobs", mode});
    auto r = run_train(flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    runs[mode] = read_rows(dir / "metrics.jsonl");
  }
  const auto &a = runs["auto"], &b = runs["recompute"];
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"rollout/raw_reward", "train/loss", "train/pg_loss", "train/grad_norm",
                            "train/ppo_kl", "train/train_rollout_logprob_abs_diff"}) {
      EXPECT_EQ(value(a[i], key), value(b[i], key)) << key << " at rollout " << i;
    }
    // The same per-token values averaged per micro-batch instead of over the rollout: the fp32
    // per-sample means may round differently, each a sum of <= 16 terms (gamma_16 = 1e-6).
    EXPECT_NEAR(value(a[i], "rollout/log_probs"), value(b[i], "rollout/log_probs"),
                1e-6 * std::abs(value(b[i], "rollout/log_probs")))
        << "rollout " << i;
    EXPECT_FALSE(a[i].contains("perf/log_probs_time")) << "auto ran the pass at rollout " << i;
    EXPECT_TRUE(b[i].contains("perf/log_probs_time")) << "recompute skipped it at rollout " << i;
  }
}

TEST(RlEndToEnd, BadInputsFailClearly) {
  auto dir = scratch_dir();
  {
    std::ofstream bad(dir / "bad.jsonl");
    bad << "{\"input\": \"1+1=\", \"label\": \"2\"}\n{not json\n";
  }
  auto flags = grpo_flags(dir, 1);
  flags.insert(flags.end(), {"--colocate"});
  auto with_data = [&](const std::string& file) {
    auto f = flags;
    for (size_t i = 0; i + 1 < f.size(); ++i) {
      if (f[i] == "--prompt-data") f[i + 1] = file;
    }
    return f;
  };
  auto r = run_train(with_data((dir / "bad.jsonl").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad.jsonl:2"), std::string::npos) << r.output;

  {
    std::ofstream missing(dir / "missing.jsonl");
    missing << "{\"question\": \"1+1=\"}\n";
  }
  r = run_train(with_data((dir / "missing.jsonl").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("input"), std::string::npos) << r.output;

  auto f = flags;
  f.insert(f.end(), {"--use-rollout-logprobs", "--use-tis"});
  r = run_train(f);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--use-tis"), std::string::npos) << r.output;

  // A dead engine URL: a clear error naming it, not a hang.
  f = grpo_flags(dir, 1);
  f.insert(f.end(),
           {"--rollout-engine-urls", "http://127.0.0.1:9", "--engine-startup-timeout", "3"});
  r = run_train(f);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("127.0.0.1:9"), std::string::npos) << r.output;
}

// Training on NaN must not look like success: weights that are not finite are never sent to
// an engine (and never pass the weight digest check), so the run stops at the startup sync.
TEST(RlEndToEnd, NonFiniteWeightsAreNeverSyncedToTheEngine) {
  auto dir = scratch_dir();
  const auto model = dir / "nan_model";
  fs::copy(fixture().model, model, fs::copy_options::recursive);
  const std::string poison =
      "import sys, torch\n"
      "from safetensors.torch import load_file, save_file\n"
      "p = sys.argv[1]\n"
      "save_file({k: torch.full_like(v, float('nan')) for k, v in load_file(p).items()}, p,\n"
      "          metadata={'format': 'pt'})\n";
  auto made = run_command(shell_quote(python().string()) + " -c " + shell_quote(poison) + " " +
                          shell_quote((model / "model.safetensors").string()) + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  std::vector<std::string> flags =
      TrainFlags(grpo_flags(dir, 2)).set("--hf-checkpoint", model.string());
  flags.insert(flags.end(), {"--colocate", "--check-weight-update-equal"});
  auto r = run_train(flags);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("refusing to sync weights to the rollout engines"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("holds NaN or inf values"), std::string::npos) << r.output;
  EXPECT_TRUE(read_rows(dir / "metrics.jsonl").empty());
}

TEST(RlEndToEnd, DeadRewardServerIsAClearErrorNotAHang) {
  auto dir = scratch_dir();
  std::vector<std::string> flags = TrainFlags(grpo_flags(dir, 2)).drop("--rm-type");
  flags.insert(flags.end(), {"--colocate", "--rm-url", "http://127.0.0.1:9/reward",
                             "--rm-timeout-seconds", "1", "--rm-max-retries", "1"});
  auto r = run_train(flags);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("the reward server failed for"), std::string::npos) << r.output;
}

// An engine server killed in the middle of a run ends the run with an error naming the
// engine; the last checkpoint written before stays loadable (export-hf reads it).
TEST(RlEndToEnd, EngineDyingMidRunFailsClearlyAndKeepsTheCheckpoint) {
  auto dir = scratch_dir();
  const auto& f = fixture();
  auto flags = grpo_flags(dir, 400);
  flags.insert(flags.end(), {"--rollout-engine-urls", "http://127.0.0.1:$PORT", "--save",
                             (dir / "ckpt").string(), "--save-interval", "1"});
  std::string script =
      "set -u\nPORT=$(python3 -c 'import socket; s=socket.socket(); "
      "s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])')\n" +
      shell_quote(furlong_binary().string()) + " serve --hf-checkpoint " +
      shell_quote(f.model.string()) + " --port $PORT --num-threads 1 > " +
      shell_quote((dir / "serve.log").string()) + " 2>&1 &\nSERVER=$!\n";
  std::string train = shell_quote(furlong_binary().string()) + " train ";
  for (const auto& a : flags) {
    train += (a.find("$PORT") != std::string::npos ? "\"" + a + "\"" : shell_quote(a)) + " ";
  }
  script += train + " > " + shell_quote((dir / "train.log").string()) + " 2>&1 &\nTRAIN=$!\n";
  // Kill the engine once two rollouts are logged (checkpoints exist by then).
  script += "for i in $(seq 600); do n=$(cat " + shell_quote((dir / "metrics.jsonl").string()) +
            " 2>/dev/null | wc -l); [ \"$n\" -ge 2 ] && break; sleep 0.1; done\n"
            "kill -9 $SERVER\nwait $TRAIN; echo \"train exit $?\"\ncat " +
            shell_quote((dir / "train.log").string()) + "\n";
  {
    std::ofstream out(dir / "run.sh");
    out << script;
  }
  auto r = run_command("bash " + shell_quote((dir / "run.sh").string()) + " 2>&1");
  EXPECT_EQ(r.output.find("train exit 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train exit"), std::string::npos) << r.output;
  // The error line names the dead engine, whichever request of the trainer met it first
  // (a generate, an abort of leftovers, or a weight sync).
  const auto at = r.output.find("furlong train: error: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string error_line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_TRUE(error_line.find("engine http://127.0.0.1:") != std::string::npos ||
              error_line.find("weight sync (version") != std::string::npos)
      << error_line;
  EXPECT_NE(error_line.find("http://127.0.0.1:"), std::string::npos) << error_line;
  auto exported = run_command(shell_quote(furlong_binary().string()) + " export-hf --load " +
                              shell_quote((dir / "ckpt").string()) + " --out " +
                              shell_quote((dir / "hf").string()) + " 2>&1");
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
}

TEST(RlEndToEnd, YamlConfigAppliesAndUnknownKeysAreRejected) {
  auto dir = scratch_dir();
  {
    std::ofstream yaml(dir / "run.yaml");
    yaml << "num-rollout: 2\nrollout_batch_size: 4\nglobal-batch-size: 32\ncolocate: true\n";
  }
  // The file applies; the command line beats it (--num-rollout 3 from grpo_flags' 3).
  std::vector<std::string> flags =
      TrainFlags(grpo_flags(dir, 3)).drop("--rollout-batch-size").drop("--global-batch-size");
  flags.insert(flags.end(), {"--config", (dir / "run.yaml").string()});
  auto r = run_train(flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 rollouts of 4 prompts x 8 samples, global batch 32"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(read_rows(dir / "metrics.jsonl").size(), 3u);

  {
    std::ofstream yaml(dir / "typo.yaml");
    yaml << "rollout-temprature: 0.7\n";
  }
  flags = grpo_flags(dir, 1);
  flags.insert(flags.end(), {"--config", (dir / "typo.yaml").string()});
  r = run_train(flags);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown key(s) in the YAML config: 'rollout-temprature'"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("did you mean 'rollout_temperature'"), std::string::npos) << r.output;
}

// bf16 compute on the fp32 checkpoint: the engines compute in bf16, the trainer sends weights
// rounded to bf16, and --check-weight-update-equal holds on every sync (it compared the
// engine's bf16 digest with the fp32 bytes sent, and failed, before the trainer sent bf16).
std::vector<std::string> bf16_compute_flags(const fs::path& dir, int rollouts) {
  return TrainFlags(grpo_flags(dir, rollouts))
      .set("--compute-dtype", "bfloat16")
      .add({"--check-weight-update-equal"});
}

TEST(RlEndToEnd, Bf16ComputeOnAnFp32CheckpointSyncsTheEnginesBitExactly) {
  {
    auto dir = scratch_dir();
    auto flags = bf16_compute_flags(dir, 2);
    flags.push_back("--colocate");
    auto r = run_train(flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_GE(read_rows(dir / "metrics.jsonl").size(), 2u) << r.output;
  }
  {
    auto dir = scratch_dir();
    auto flags = bf16_compute_flags(dir, 2);
    flags.insert(flags.end(), {"--rollout-num-engines", "1"});
    auto r = run_train(flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_GE(read_rows(dir / "metrics.jsonl").size(), 2u) << r.output;
  }
}

}  // namespace
}  // namespace furlong::testing
