// Resharding checkpoints through `furlong train`: resume reproduces the run (exactly at the same
// topology, within fp32 tolerance at another), a save killed midway leaves the previous
// checkpoint loadable, and `furlong export-hf` writes a directory transformers loads.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "backend/checkpoint.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "common/train_test_util.h"
#include "core/files.h"
#include "core/jsonl.h"
#include "io/safetensors.h"
#include "models/hf_model.h"

namespace furlong::backend {
namespace {

namespace fs = std::filesystem;
using namespace testing;

class Checkpoints : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = furlong::testing::binary_dir() / "testdata" / ("ckpt." + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_model(dir_ / "model", tiny_config(false), at::kBFloat16, 5);
    write_sft_data(dir_ / "data.jsonl", 48, 61, 9);
  }

  // `furlong train` for 6 rollouts of 8 samples (one step each) as `nproc` ranks.
  static RunResult train(int nproc, int replicas, const std::string& save,
                         const std::string& metrics, std::vector<std::string> extra = {},
                         const std::string& env = "", const fs::path& model = {}) {
    std::vector<std::string> argv = {furlong::testing::furlong_binary().string(),
                                     "train",
                                     "--hf-checkpoint",
                                     (model.empty() ? dir_ / "model" : model).string(),
                                     "--loss-type",
                                     "sft",
                                     "--prompt-data",
                                     (dir_ / "data.jsonl").string(),
                                     "--global-batch-size",
                                     "8",
                                     "--num-rollout",
                                     "6",
                                     "--lr",
                                     "1e-3",
                                     "--weight-decay",
                                     "0.01",
                                     "--compute-dtype",
                                     "float32",
                                     "--lr-decay-style",
                                     "cosine",
                                     "--min-lr",
                                     "1e-4",
                                     "--dp-replicate-size",
                                     std::to_string(replicas),
                                     "--save",
                                     save,
                                     "--save-interval",
                                     "3",
                                     "--metrics-file",
                                     metrics};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (!env.empty()) setenv("FURLONG_FAULT_KILL_IN_SAVE", env.c_str(), 1);
    auto r = run_ranks(nproc, argv);
    unsetenv("FURLONG_FAULT_KILL_IN_SAVE");
    return r;
  }

  // Trains `config` (a tiny Qwen3.5 or Qwen3.5-MoE) under FSDP, exports it, and compares
  // transformers' logits of the export with furlong's (below).
  static void expect_qwen3_5_trains_and_exports(const std::string& name, const Json& config,
                                                const fs::path& source = {});

  static std::vector<double> losses(const fs::path& metrics) {
    std::vector<double> out;
    for (const auto& row : read_jsonl(metrics))
      out.push_back(row.value["train/loss"].get<double>());
    return out;
  }

  // A copy of `run`'s checkpoints holding only iteration 3 (as if the run had stopped there).
  static fs::path only_iteration_3(const fs::path& run, const std::string& name) {
    auto copy = dir_ / name;
    fs::remove_all(copy);
    fs::create_directories(copy);
    fs::copy(iteration_dir(run, 3), iteration_dir(copy, 3), fs::copy_options::recursive);
    write_file_atomic(copy / "latest_checkpointed_iteration.txt", "3\n");
    return copy;
  }

  static fs::path dir_;
};
fs::path Checkpoints::dir_;

TEST_F(Checkpoints, ResumeReproducesTheRunAtTheSameAndAnotherTopology) {
  auto full = train(4, 2, (dir_ / "full").string(), (dir_ / "full.jsonl").string());
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto reference = losses(dir_ / "full.jsonl");
  ASSERT_EQ(reference.size(), 6u);
  EXPECT_EQ(latest_iteration(dir_ / "full"), 6);

  struct Resume {
    int nproc, replicas;
    const char* name;
    bool exact;
  };
  for (Resume r : {Resume{4, 2, "same_r2s2", true}, Resume{4, 1, "r1s4", false},
                   Resume{0, 1, "single", false}}) {
    SCOPED_TRACE(r.name);
    auto ckpt = only_iteration_3(dir_ / "full", std::string("resume_") + r.name);
    auto metrics = dir_ / (std::string(r.name) + ".jsonl");
    auto run =
        train(r.nproc, r.replicas, ckpt.string(), metrics.string(), {"--load", ckpt.string()});
    ASSERT_EQ(run.exit_code, 0) << run.output;
    auto resumed = losses(metrics);
    ASSERT_EQ(resumed.size(), 3u) << "steps 4-6 only";
    for (size_t i = 0; i < 3; ++i) {
      if (r.exact) {
        EXPECT_EQ(resumed[i], reference[3 + i]) << "step " << 4 + i;
      } else {
        EXPECT_NEAR(resumed[i], reference[3 + i], 2e-6 + 2e-5 * std::abs(reference[3 + i]))
            << "step " << 4 + i;
      }
    }
  }
}

TEST_F(Checkpoints, AKilledSaveLeavesThePreviousCheckpointLoadable) {
  auto save = dir_ / "killed";
  auto run = train(4, 2, save.string(), (dir_ / "killed.jsonl").string(), {}, "1:6");
  EXPECT_NE(run.exit_code, 0) << "rank 1 was killed during the second save";
  EXPECT_EQ(latest_iteration(save), 3);
  EXPECT_TRUE(fs::exists(iteration_dir(save, 3) / "meta.json"));
  EXPECT_FALSE(fs::exists(iteration_dir(save, 6))) << "the partial save must not be published";
  // What a save killed while writing the tracker leaves (write_file_atomic's temporary).
  const auto stale_tmp = save / "latest_checkpointed_iteration.txt.tmp.12345.678";
  write_file_atomic(stale_tmp, "6\n");
  // Resuming picks iteration 3, ignores the partial directory, and completes the run; the
  // load from its own --save directory removes the leftovers of the killed save.
  auto resumed = train(4, 2, save.string(), (dir_ / "killed_resumed.jsonl").string(),
                       {"--load", save.string()});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(dir_ / "killed_resumed.jsonl").size(), 3u);
  EXPECT_EQ(latest_iteration(save), 6);
  EXPECT_FALSE(fs::exists(stale_tmp)) << "a killed save's temporary was left behind";
  EXPECT_FALSE(fs::exists(iteration_dir(save, 6).string() + ".partial"));
  for (const auto& entry : fs::directory_iterator(save)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

fs::path meta_path(const fs::path& save) {
  return iteration_dir(save, latest_iteration(save).value()) / "meta.json";
}

TEST_F(Checkpoints, ExportHfWritesADirectoryTransformersLoads) {
  auto save = dir_ / "export_run";
  ASSERT_EQ(train(4, 1, save.string(), (dir_ / "export.jsonl").string()).exit_code, 0);
  auto out = dir_ / "exported";
  auto r = furlong::testing::run_command(
      furlong::testing::shell_quote(furlong::testing::furlong_binary().string()) +
      " export-hf --load " + furlong::testing::shell_quote(save.string()) + " --out " +
      furlong::testing::shell_quote(out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The run computed in fp32 (--compute-dtype float32) from a bf16 checkpoint: the policy it
  // trained is the fp32 master, which is what the export writes by default.
  EXPECT_EQ(read_json_file(meta_path(save))["compute_dtype"], "float32");
  EXPECT_EQ(read_json_file(out / "config.json")["torch_dtype"], "float32");
  // Asked for the checkpoint's bf16, it says what the rounding costs.
  auto narrowed = dir_ / "exported_bf16";
  auto rb = furlong::testing::run_command(
      furlong::testing::shell_quote(furlong::testing::furlong_binary().string()) +
      " export-hf --dtype bfloat16 --load " + furlong::testing::shell_quote(save.string()) +
      " --out " + furlong::testing::shell_quote(narrowed.string()) + " 2>&1");
  ASSERT_EQ(rb.exit_code, 0) << rb.output;
  EXPECT_NE(rb.output.find("rounds the trained policy's float32 weights"), std::string::npos)
      << rb.output;
  EXPECT_EQ(read_json_file(narrowed / "config.json")["torch_dtype"], "bfloat16");
  // transformers loads it and computes the same log-probs as furlong on the same directory.
  std::vector<std::vector<int64_t>> docs = {{1, 5, 9, 13, 2, 40}, {7, 7, 3}};
  Json plan = Json::array({{{"name", "export"},
                            {"mode", "load"},
                            {"model_dir", out.string()},
                            {"dtype", "float32"},
                            {"attn", "sdpa"},
                            {"documents", docs},
                            {"want", {"logits"}}}});
  write_file_atomic(dir_ / "export_plan.json", plan.dump());
  furlong::testing::run_python("oracles/hf_model_oracle.py",
                               {(dir_ / "export_plan.json").string(), dir_.string()});
  auto ref = io::SafetensorsFile::open(dir_ / "export" / "outputs.safetensors")->tensor("logits");
  c10::InferenceMode inference;
  auto ours = models::load_hf_model(out, {.dtype = at::kFloat})
                  ->forward_logits(models::PackedBatch::from_documents(docs));
  EXPECT_LE(furlong::testing::max_abs_diff(ours, ref), 1e-4);
}

// Qwen3.5 (Gated DeltaNet + gated attention) under FSDP on 2 ranks, saved, exported: transformers
// loads the export (each document run alone: its torch code does not reset the DeltaNet state
// at packed boundaries) and computes furlong's logits. Bound: the fp32 forward budget of
// tests/models/qwen3_5_test.cpp for this model (4 layers, k_max 64 here: 16 reductions per
// layer, 23 with MoE MLPs), twice (two implementations): 2 gamma_prob(reductions * 64) times
// the logits' absolute scale (tol::head_abs_scale), e.g. 2 x 2.8e-5 x a scale of a few units for
// the MoE model. The MoE export also keeps transformers' per-expert names, and its routing (a
// discrete choice) must agree for the logits to.
Json tiny_qwen3_5_config(bool moe) {
  Json config = tiny_config(false);
  config.merge_patch({{"architectures", {"Qwen3_5ForCausalLM"}},
                      {"model_type", "qwen3_5_text"},
                      {"num_hidden_layers", 4},
                      {"head_dim", 8},
                      {"linear_num_key_heads", 2},
                      {"linear_num_value_heads", 4},
                      {"linear_key_head_dim", 8},
                      {"linear_value_head_dim", 8}});
  if (moe) {
    config.merge_patch({{"architectures", {"Qwen3_5MoeForCausalLM"}},
                        {"model_type", "qwen3_5_moe_text"},
                        {"num_experts", 4},
                        {"num_experts_per_tok", 2},
                        {"moe_intermediate_size", 16},
                        {"shared_expert_intermediate_size", 16}});
  }
  return config;
}

void Checkpoints::expect_qwen3_5_trains_and_exports(const std::string& name, const Json& config,
                                                    const fs::path& source) {
  const auto model = source.empty() ? dir_ / name : source;
  if (source.empty()) write_model(model, config, at::kFloat, 6);
  auto save = dir_ / (name + "_run");
  auto run = train(2, 1, save.string(), (dir_ / (name + ".jsonl")).string(), {}, "", model);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto rows = read_jsonl(dir_ / (name + ".jsonl"));
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_LT(rows.back().value["train/loss"].get<double>(),
            rows.front().value["train/loss"].get<double>());
  auto out = dir_ / (name + "_exported");
  auto r = furlong::testing::run_command(
      furlong::testing::shell_quote(furlong::testing::furlong_binary().string()) +
      " export-hf --load " + furlong::testing::shell_quote(save.string()) + " --out " +
      furlong::testing::shell_quote(out.string()) + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::vector<int64_t>> docs = {{1, 5, 9, 13, 2, 40}, {7, 7, 3}};
  Json plan = Json::array({{{"name", name + "_export"},
                            {"mode", "load"},
                            {"model_dir", out.string()},
                            {"dtype", "float32"},
                            {"attn", "eager"},
                            {"documents", docs},
                            {"separate_documents", true},
                            {"want", {"logits"}}}});
  write_file_atomic(dir_ / (name + "_plan.json"), plan.dump());
  furlong::testing::run_python("oracles/hf_model_oracle.py",
                               {(dir_ / (name + "_plan.json")).string(), dir_.string()});
  auto ref = io::SafetensorsFile::open(dir_ / (name + "_export") / "outputs.safetensors")
                 ->tensor("logits");
  c10::InferenceMode inference;
  auto exported = models::load_hf_model(out, {.dtype = at::kFloat});
  auto hidden = exported->forward_hidden(models::PackedBatch::from_documents(docs));
  const auto& w = exported->weights();
  const auto& head = exported->head_weight(w[0], w[exported->final_unit()]);
  auto ours = at::linear(hidden, head);
  // The bound of the header comment: two implementations' fp32 budgets.
  const double reductions = (exported->config().moe.enabled() ? 23.0 : 16.0) * 4 + 2;
  namespace tol = furlong::testing::tol;
  const double bound =
      2 * tol::gamma_prob(reductions * 64, tol::kUFp32) * tol::head_abs_scale(hidden, head);
  EXPECT_LT(bound, 1e-3) << "the bound must stay meaningful";
  EXPECT_LE(tol::noted("qwen3_5_export_logits", furlong::testing::max_abs_diff(ours, ref), bound),
            bound);
}

TEST_F(Checkpoints, Qwen35TrainsUnderFsdpAndExportsWhatTransformersLoads) {
  expect_qwen3_5_trains_and_exports("qwen3_5", tiny_qwen3_5_config(false));
}

TEST_F(Checkpoints, Qwen35MoeTrainsUnderFsdpAndExportsWhatTransformersLoads) {
  expect_qwen3_5_trains_and_exports("qwen3_5_moe", tiny_qwen3_5_config(true));
}

// A multimodal checkpoint (Qwen3_5ForConditionalGeneration, made by transformers with its vision
// tower): its text model trains as above, and the export is the same kind of checkpoint, the
// text tensors under model.language_model.* and every other tensor (the vision tower) the
// bits it was loaded with.
TEST_F(Checkpoints, Qwen35MultimodalTrainsItsTextModelAndExportsTheVisionTowerUnchanged) {
  // transformers' initialization at std 0.02 (tiny_config's 0.2 gives logits so large that six
  // steps of lr 1e-3 need not lower the loss).
  Json text_model = tiny_qwen3_5_config(false);
  text_model["initializer_range"] = 0.02;
  const Json config = furlong::testing::tiny_qwen3_5_multimodal_config(text_model);
  Json plan = Json::array({{{"name", "qwen3_5_mm_source"},
                            {"mode", "create"},
                            {"config", config},
                            {"seed", 6},
                            {"dtype", "float32"},
                            {"attn", "eager"},
                            {"documents", {{1, 2, 3}}},
                            {"want", {"logits"}}}});
  write_file_atomic(dir_ / "qwen3_5_mm_plan.json", plan.dump());
  furlong::testing::run_python("oracles/hf_model_oracle.py",
                               {(dir_ / "qwen3_5_mm_plan.json").string(), dir_.string()});
  const auto source = dir_ / "qwen3_5_mm_source" / "model";
  expect_qwen3_5_trains_and_exports("qwen3_5_mm", config, source);
  auto before = io::HfWeights::open(source);
  auto after = io::HfWeights::open(dir_ / "qwen3_5_mm_exported");
  EXPECT_EQ(after.names(), before.names());
  int vision = 0, text = 0;
  for (const auto& name : before.names()) {
    if (!after.contains(name)) continue;
    if (name.starts_with("model.visual.")) {
      ++vision;
      EXPECT_TRUE(at::equal(after.get(name), before.get(name))) << name;
    } else if (name.starts_with("model.language_model.layers.") && name.ends_with("proj.weight")) {
      ++text;
      EXPECT_FALSE(at::equal(after.get(name), before.get(name))) << name << " was not trained";
    }
  }
  EXPECT_GT(vision, 10);
  EXPECT_GT(text, 10);
  auto exported = read_json_file(dir_ / "qwen3_5_mm_exported" / "config.json");
  EXPECT_EQ(exported["architectures"], Json::array({"Qwen3_5ForConditionalGeneration"}));
  EXPECT_TRUE(exported.contains("vision_config"));
}

}  // namespace
}  // namespace furlong::backend
