// Routing replay (R3, R2), the load-balancing loss and the router metrics of the FSDP backend,
// on a tiny Qwen3-MoE (3 layers, layer 1 dense, 8 experts, top-2), through moe_replay_worker.
//
// Replay: the trainer's model is the routing model with its routers perturbed, so its free
// routing differs for some tokens (asserted); the trainer must still use exactly the recorded
// ids in the old-policy pass, the training forwards and their recomputation in backward
// (gradient checkpointing), packed 2 samples per micro-batch, on 1 and 2 ranks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "common/arith_task.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/train_test_util.h"
#include "core/files.h"
#include "models/hf_model.h"
#include "train/options.h"

namespace furlong::backend {
namespace {

namespace fs = std::filesystem;
using furlong::testing::binary_dir;

struct Fixture {
  fs::path root, model, perturbed, other, dense;
};

// The tiny Qwen3-MoE of the arithmetic tokenizer: hidden 32, 8 experts of width 16, 2 per
// token, layer 1 dense.
Json moe_config() {
  return furlong::testing::as_qwen3_moe(furlong::testing::arith_qwen3_config(),
                                        {{"hidden_size", 32},
                                         {"intermediate_size", 48},
                                         {"moe_intermediate_size", 16},
                                         {"head_dim", 8},
                                         {"decoder_sparse_step", 1},
                                         {"tie_word_embeddings", false},
                                         {"initializer_range", 0.2}});
}

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.root = furlong::testing::fresh_process_dir("train", "moe_fixture");
    x.model = furlong::testing::init_tiny_model(x.root, "model", 3, "float32", moe_config());
    x.perturbed = x.root / "perturbed";
    x.dense = x.root / "dense";
    x.other = x.root / "other";
    // Routers perturbed by 20% of their spread: small enough that most tokens keep their
    // experts, large enough that some flip (the replay test asserts both).
    auto model = models::load_hf_model(x.model);
    at::manual_seed(9);
    for (int64_t l = 0; l < model->num_layers(); ++l) {
      if (!model->config().moe.is_sparse_layer(l)) continue;
      auto& w = model->weight("model.layers." + std::to_string(l) + ".mlp.gate.weight");
      w.add_(at::randn_like(w) * (0.2 * w.std().item<double>()));
    }
    models::save_hf_model(*model, x.perturbed, at::kFloat);
    testing::write_model(x.dense, testing::tiny_config(true), at::kFloat, 1);
    testing::write_model(x.other, moe_config(), at::kFloat, 4);  // unrelated routers
    return x;
  }();
  return f;
}

fs::path replay_worker() {
  return binary_dir() / "tests" / "backend" / "moe_replay_worker";
}

// Runs the worker on `ranks` ranks (0: one plain process) and returns each rank's JSON.
std::vector<Json> run_worker(int ranks, const std::string& name, std::vector<std::string> args,
                             testing::RunResult* result = nullptr) {
  auto out = fixture().root / name;
  fs::remove_all(out);
  args.insert(args.begin(), replay_worker().string());
  args.insert(args.end(), {"--out", out.string()});
  auto r = testing::run_ranks(ranks, args);
  if (result != nullptr) {
    *result = r;
    return {};
  }
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<Json> per_rank;
  for (int k = 0; k < std::max(1, ranks); ++k) {
    per_rank.push_back(read_json_file(out / ("rank-" + std::to_string(k) + ".json")));
  }
  return per_rank;
}

// Sums a pass's (rows, differing) over ranks.
std::pair<int64_t, int64_t> pass_totals(const std::vector<Json>& ranks, const std::string& pass) {
  int64_t rows = 0, differ = 0;
  for (const auto& r : ranks) {
    if (!r.contains("passes") || !r["passes"].contains(pass)) continue;
    rows += r["passes"][pass]["rows"].get<int64_t>();
    differ += r["passes"][pass]["differ"].get<int64_t>();
  }
  return {rows, differ};
}

void expect_exact_replay(const std::vector<Json>& ranks, bool r3) {
  if (r3) {
    // Every rank routes all samples freely: rank 0's counts cover the rollout.
    const auto free_rows = ranks[0]["free_rows"].get<int64_t>();
    const auto free_differ = ranks[0]["free_differ"].get<int64_t>();
    // The perturbation must matter (else the test could not fail), but not everywhere.
    EXPECT_GT(free_differ, 0) << "the perturbed routers route every token as recorded";
    EXPECT_LT(free_differ, free_rows);
    std::printf(
        "free routing of the perturbed trainer differs in %lld of %lld token x layer rows\n",
        static_cast<long long>(free_differ), static_cast<long long>(free_rows));
  }
  for (const char* pass : {"log_probs", "train_forward", "train_backward"}) {
    auto [rows, differ] = pass_totals(ranks, pass);
    EXPECT_GT(rows, 0) << pass;
    EXPECT_EQ(differ, 0) << pass << ": " << differ << " of " << rows << " rows not replayed";
  }
  EXPECT_EQ(ranks[0]["steps"].size(), 2u);  // 16 samples, 8 per step: replay holds after a step
}

std::vector<std::string> replay_args(const std::string& mode) {
  const auto& f = fixture();
  return {"--model",
          f.perturbed.string(),
          "--routing-model",
          f.model.string(),
          "--replay",
          mode,
          "--micro-batch-size",
          "2",
          "--global-batch-size",
          "8",
          "--samples",
          "16",
          "--gradient-checkpointing"};
}

TEST(MoeReplay, R3ReplaysTheRecordedExpertsOnOneRank) {
  expect_exact_replay(run_worker(0, "r3_1", replay_args("r3")), true);
}

TEST(MoeReplay, R3ReplaysTheRecordedExpertsOnTwoRanks) {
  expect_exact_replay(run_worker(2, "r3_2", replay_args("r3")), true);
}

TEST(MoeReplay, R2ReplaysTheOldPolicyPassInTraining) {
  expect_exact_replay(run_worker(2, "r2_2", replay_args("r2")), false);
}

// --ci-test: miles' replay check. One step on the routing model's own weights: every free
// top-k is the replayed one (fraction exactly 0). Another model's routers (seeded apart)
// share no expert with the recorded ids for about C(6,2)/C(8,2) = 54% of the tokens, far
// above miles' 1%: the run stops naming the check.
TEST(MoeReplay, CiTestChecksTheReplayedRouting) {
  const auto& f = fixture();
  auto ranks = run_worker(0, "ci",
                          {"--model", f.model.string(), "--routing-model", f.model.string(),
                           "--replay", "r3", "--ci-test", "--samples", "8"});
  const auto& last = ranks[0]["steps"].back();
  ASSERT_TRUE(last.contains("ci/r3_mismatch_fraction")) << last.dump();
  EXPECT_EQ(last["ci/r3_mismatch_fraction"].get<double>(), 0.0);
  testing::RunResult r;
  run_worker(0, "ci_perturbed",
             {"--model", f.other.string(), "--routing-model", f.model.string(), "--replay", "r3",
              "--ci-test", "--samples", "8"},
             &r);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--ci-test routing replay check"), std::string::npos) << r.output;
}

// The aux loss: on with a coefficient, the step's loss grows by exactly coeff * the
// load-balancing loss (the trainer's sums add it in double precision); the logged value is
// the loss transformers' formula gives for the one packed micro-batch; off by default.
TEST(MoeAuxLoss, AddsCoeffTimesTheLoadBalancingLoss) {
  const auto& f = fixture();
  auto run = [&](const std::string& name, double coeff) {
    return run_worker(0, name,
                      {"--model", f.model.string(), "--replay", "none", "--micro-batch-size", "16",
                       "--global-batch-size", "16", "--samples", "16", "--moe-aux-loss-coeff",
                       std::to_string(coeff)})[0];
  };
  auto off = run("aux_off", 0.0), on = run("aux_on", 0.5);
  const auto &s0 = off["steps"][0], s1 = on["steps"][0];
  const double lb = s1["moe/lb_loss"].get<double>();
  // Same weights and inputs: the forward is the same computation in both runs.
  EXPECT_EQ(lb, s0["moe/lb_loss"].get<double>());
  // The worker's own forward over the same packed batch (single-device model, same kernels):
  // fp32 means over ~130 tokens, relative rounding <= 130 * 2^-24 ~ 1e-5.
  const double want = on["lb_loss_all_samples"].get<double>();
  EXPECT_NEAR(lb, want, 1e-5 * want);
  EXPECT_GE(lb, 2.0 - 1e-5);  // the minimum of E * sum f_e p_e is top_k
  const double diff = s1["loss"].get<double>() - s0["loss"].get<double>();
  EXPECT_NEAR(diff, 0.5 * lb, 1e-12 * std::abs(s1["loss"].get<double>()) + 1e-12);
  EXPECT_NE(s1["grad_norm"].get<double>(), s0["grad_norm"].get<double>());
  // Router load per MoE layer (0 and 2; layer 1 is dense): shares of the top-k assignments.
  for (const char* layer : {"0", "2"}) {
    const auto prefix = std::string("moe/layer_") + layer + "/";
    ASSERT_TRUE(s0.contains(prefix + "max_expert_share")) << s0.dump();
    EXPECT_LE(s0[prefix + "min_expert_share"].get<double>(), 1.0 / 8);
    EXPECT_GE(s0[prefix + "max_expert_share"].get<double>(), 1.0 / 8);
  }
  EXPECT_FALSE(s0.contains("moe/layer_1/max_expert_share"));
  EXPECT_EQ(train::TrainOptions{}.moe.moe_aux_loss_coeff, 0.0);
}

TEST(MoeFlags, DenseModelsRefuseThem) {
  const auto& f = fixture();
  for (const auto& [flags, name] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--replay", "r3"}, "--use-rollout-routing-replay"},
           {{"--replay", "r2"}, "--use-routing-replay"},
           {{"--replay", "none", "--moe-aux-loss-coeff", "0.01"}, "--moe-aux-loss-coeff"}}) {
    std::vector<std::string> args{"--model", f.dense.string(), "--routing-model", f.model.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    testing::RunResult r;
    run_worker(0, "dense_out", args, &r);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(name + " needs a mixture-of-experts model"), std::string::npos)
        << r.output;
  }
}

TEST(MoeFlags, RolloutReplayImpliesRoutingReplay) {
  train::TrainOptions o;
  o.moe.use_rollout_routing_replay = true;
  prepare_options_before_launch(o, false);
  EXPECT_TRUE(o.moe.use_routing_replay);
  train::TrainOptions sft;
  sft.batch.loss_type = LossType::kSftLoss;
  sft.moe.use_routing_replay = true;
  try {
    validate_options(sft, 1);
    ADD_FAILURE() << "--use-routing-replay with SFT was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs --loss-type policy_loss"), std::string::npos)
        << e.what();
  }
}

// Trainer vs engine |dlogp| in bf16 with and without R3 (the table goes to the test output).
// Without R3 a token whose top-k flips between the engine's decode-time arithmetic and the
// trainer's packed forward runs different experts in the two: its log-prob (and those after
// it) differ by far more than rounding. R3 makes the trainer run the engine's experts, so
// only the rounding differences remain: R3's mean and max are not larger. The engine's
// exact-logprobs mode reports the trainer's own full-sequence forward instead of the
// decode-time values: with free routing without R3, and with the recorded experts when the
// request returns them (R3), so in both cases it is close to the trainer's (asserted: smaller
// than the decode-time difference of the same replay mode).
TEST(MoeReplay, TrainerVsEngineLogProbsInBf16) {
  const auto& f = fixture();
  auto out = f.root / "dlogp";
  fs::remove_all(out);
  auto r = testing::run_ranks(0, {replay_worker().string(), "--task", "dlogp", "--model",
                                  f.model.string(), "--out", out.string(), "--samples", "32"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto t = read_json_file(out / "dlogp.json");
  std::printf("\n| engine log-probs | replay | mean |dlogp| | max |dlogp| | tokens |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const auto& [key, row] : t.items()) {
    auto slash = key.find('/');
    std::printf("| %s | %s | %.3g | %.3g | %lld |\n", key.substr(0, slash).c_str(),
                key.substr(slash + 1).c_str(), row["mean"].get<double>(), row["max"].get<double>(),
                static_cast<long long>(row["tokens"].get<int64_t>()));
  }
  const auto& none = t["decode_logprobs/none"];
  std::printf(
      "free routing (bf16 trainer) differs from the engine's in %lld of %lld token x "
      "layer rows\n",
      static_cast<long long>(none["free_differ"].get<int64_t>()),
      static_cast<long long>(none["free_rows"].get<int64_t>()));
  const auto& r3 = t["decode_logprobs/r3"];
  EXPECT_LE(r3["mean"].get<double>(), none["mean"].get<double>());
  EXPECT_LE(r3["max"].get<double>(), none["max"].get<double>());
  EXPECT_GT(none["free_differ"].get<int64_t>(), 0) << "no top-k flip: R3 had nothing to fix";
  EXPECT_LT(t["exact_logprobs/none"]["mean"].get<double>(), none["mean"].get<double>());
  EXPECT_LT(t["exact_logprobs/r3"]["mean"].get<double>(), r3["mean"].get<double>());
  EXPECT_LE(t["exact_logprobs/r3"]["max"].get<double>(), r3["max"].get<double>());
}

}  // namespace
}  // namespace furlong::backend
