// Rollout routing replay (R3) end to end: `furlong train --colocate` on 2 CPU ranks (one engine
// per rank) with GRPO on a tiny random Qwen3-MoE (2 layers, 8 experts, top-2), and on a tiny
// Qwen3.5-MoE (DeltaNet and attention layers, routed and shared experts), and the "a+b="
// task of rl_e2e_test.cpp, with --use-rollout-routing-replay, --ci-test (miles' replay check)
// and --gradient-checkpointing (the recomputed blocks replay too), as miles' R3 e2e tests run.
//
// What must hold, and why:
// - The run completes: every sample carries the engine's routing (the trainer fails naming the
//   sample otherwise) and the replay check passes on every rollout: at most 1% of the replayed
//   tokens have a free top-k sharing no expert with the engine's (fp32, the same weights: 0 on
//   the old-policy pass; one optimizer step per rollout, so the training forward sees the same
//   weights too).
// - train/ppo_kl is exactly 0: the old-policy pass and the training forward replay the same ids
//   on the same weights and packing.
// - Engine vs trainer log-probs agree to the forward's rounding, as for the dense model
//   (rl_e2e_test.cpp: 1e-4 for two fp32 computations of this size), because R3 makes both run
//   the same experts for every token (a flip would cost far more than 1e-4).
// - GRPO raises the reward (two-proportion z > 5 between the first and last 4 rollouts).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/arith_task.h"
#include "common/rl_flags.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "core/json_util.h"

namespace furlong::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kRollouts = 16;

// The tiny Qwen3 of the other e2e tests with 8 experts of width 32, 2 per token, in both layers.
Json tiny_moe_config() {
  return as_qwen3_moe(arith_qwen3_config(),
                      {{"num_hidden_layers", 2}, {"mlp_only_layers", nullptr}});
}

// The tiny Qwen3.5 of rl_e2e_test.cpp made Qwen3.5-MoE: 3 Gated DeltaNet layers and one gated
// attention layer, each with 8 routed experts of width 32 (2 per token) and a shared one.
Json tiny_qwen3_5_moe_config() {
  Json c = arith_qwen3_config();
  c.merge_patch({{"architectures", {"Qwen3_5MoeForCausalLM"}},
                 {"model_type", "qwen3_5_moe_text"},
                 {"num_hidden_layers", 4},
                 {"intermediate_size", nullptr},
                 {"linear_num_key_heads", 2},
                 {"linear_num_value_heads", 4},
                 {"linear_key_head_dim", 16},
                 {"linear_value_head_dim", 16},
                 {"num_experts", 8},
                 {"num_experts_per_tok", 2},
                 {"moe_intermediate_size", 32},
                 {"shared_expert_intermediate_size", 32}});
  return c;
}

struct Fixture {
  fs::path root, data;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.root = fresh_process_dir("e2e", "r3");
    x.data = x.root / "prompts.jsonl";
    write_arith_rows(x.data, threshold_row);
    return x;
  }();
  return f;
}

double value(const Json& row, const std::string& key) {
  EXPECT_TRUE(row.contains(key)) << key << " missing in " << row.dump();
  return row.contains(key) && row[key].is_number() ? row[key].get<double>() : NAN;
}

// Runs the R3 GRPO of the header comment on `config` and checks what must hold; `lp_bound` is
// the engine-vs-trainer log-prob bound for the model.
void run_r3_grpo(const std::string& name, const Json& config, double lp_bound) {
  const auto& f = fixture();
  const auto model = init_tiny_model(f.root, name, 7, "float32", config);
  const auto dir = f.root / (name + "_run");
  fs::create_directories(dir);
  const auto flags =
      threshold_grpo_flags(model, f.data, kRollouts)
          .add(tiny_trainer_flags())
          .add({"--colocate", "--use-rollout-routing-replay", "--ci-test",
                "--gradient-checkpointing", "--metrics-file", (dir / "metrics.jsonl").string()});
  std::string cmd = shell_quote(furlong_binary().string()) + " launch --nproc-per-node 2 -- " +
                    shell_quote(furlong_binary().string()) + " train";
  for (const auto& a : flags.args()) cmd += " " + shell_quote(a);
  auto r = run_command(cmd + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<Json> rows;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  ASSERT_EQ(rows.size(), static_cast<size_t>(kRollouts)) << r.output;
  const auto layers = config["num_hidden_layers"].get<int64_t>();
  double first = 0, last = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    EXPECT_LE(value(row, "ci/r3_mismatch_fraction"), 0.01) << "rollout " << i;
    EXPECT_EQ(value(row, "train/ppo_kl"), 0.0) << "rollout " << i;
    EXPECT_LE(value(row, "train/train_rollout_logprob_abs_diff"), lp_bound) << "rollout " << i;
    EXPECT_GE(value(row, "moe/lb_loss"), 2.0 - 1e-5) << "rollout " << i;  // >= top_k
    for (int64_t l = 0; l < layers; ++l) {
      const auto key = "moe/layer_" + std::to_string(l) + "/max_expert_share";
      EXPECT_GE(value(row, key), 1.0 / 8) << "rollout " << i;
    }
    if (i < 4) first += value(row, "rollout/raw_reward");
    if (i + 4 >= rows.size()) last += value(row, "rollout/raw_reward");
  }
  // z of "the last 4 rollouts beat the first 4" (4 x 64 samples each; see rl_e2e_test.cpp).
  const double n = 4 * 64, p1 = first / 4, p2 = last / 4, p = (p1 + p2) / 2;
  const double z = (p2 - p1) / std::sqrt(std::max(p * (1 - p) * 2 / n, 1e-12));
  EXPECT_GT(z, 5.0) << "first/last rewards " << p1 << " / " << p2;
  std::printf("R3 e2e %s: reward %.3f -> %.3f (z %.1f), max ci/r3_mismatch_fraction %g\n",
              name.c_str(), p1, p2, z, [&] {
                double m = 0;
                for (const auto& row : rows) m = std::max(m, value(row, "ci/r3_mismatch_fraction"));
                return m;
              }());
}

TEST(R3EndToEnd, ColocatedGrpoWithRolloutRoutingReplay) {
  run_r3_grpo("moe", tiny_moe_config(), 1e-4);
}

// The same on Qwen3.5-MoE. Log-prob bound as rl_e2e_test.cpp derives it for its tiny Qwen3.5,
// with 23 reductions per layer instead of 16 (tests/models/qwen3_5_test.cpp): gamma_prob(94 *
// 128) = 3.9e-5 of the logits' scale (<= 1.4), twice for two computations and twice for a
// log-prob: 2.2e-4.
TEST(R3EndToEnd, Qwen35MoeColocatedGrpoWithRolloutRoutingReplay) {
  run_r3_grpo("qwen3_5_moe", tiny_qwen3_5_moe_config(), 2.2e-4);
}

}  // namespace
}  // namespace furlong::testing
