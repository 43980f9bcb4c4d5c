// miles' launch scripts run as written: every flag of miles' FSDP-backend recipes and FSDP e2e
// tests (tests/e2e/data/miles_fsdp_recipe_flags.tsv, with the miles file each came from) is a
// flag of `furlong train`; miles' scripts/run_qwen3_0_6b_fsdp.py runs end to end with its flags
// verbatim (only the model, the data paths and the sizes shrunk); flags that need no model are
// checked before anything loads; --save without --save-interval behaves as in miles, with a
// warning.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/arith_task.h"
#include "common/test_util.h"
#include "core/json_util.h"
#include "core/strings.h"

namespace furlong::testing {
namespace {

namespace fs = std::filesystem;

// Flags of the fixture that other work items of the same issue add; a flag listed here is
// reported instead of failing the check, and the recipe run leaves it (and its value) out.
// Empty once every one has landed.
const std::set<std::string> kFlagsPendingOtherWork = {};

struct Fixture {
  fs::path root, model, prompts, eval;
};

// One fixture directory per test process (ctest runs the cases in parallel processes).
fs::path fixture_root() {
  return binary_dir() / "tests" / "e2e" / ("miles_recipe." + std::to_string(::getpid()));
}

// Removes the fixture directory when the test program ends, whether the tests passed or not.
class FixtureCleanup : public ::testing::Environment {
 public:
  void TearDown() override { fs::remove_all(fixture_root()); }
};
[[maybe_unused]] const auto* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new FixtureCleanup);

// A tiny random Qwen3 with the arithmetic tokenizer (its chat template included) and prompts
// keyed as in dapo-math-17k ("prompt", "label").
const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.root = fixture_root();
    fs::remove_all(x.root);
    fs::create_directories(x.root);
    x.model = init_tiny_model(x.root, "Qwen3-tiny");
    x.prompts = x.root / "dapo-math-tiny.jsonl";
    x.eval = x.root / "aime-tiny.jsonl";
    std::ofstream prompts(x.prompts), eval(x.eval);
    for (int a = 0; a <= 9; ++a) {
      for (int b = 0; a + b <= 9; ++b) {
        auto row = Json{{"prompt", std::to_string(a) + "+" + std::to_string(b) + "="},
                        {"label", std::to_string(a + b)}};
        (a < 2 && b < 2 ? eval : prompts) << row.dump() << "\n";
      }
    }
    return x;
  }();
  return f;
}

std::string command_line(const std::vector<std::string>& args) {
  std::string cmd;
  for (const auto& a : args) cmd += shell_quote(a) + " ";
  return cmd;
}

CommandResult furlong(const std::vector<std::string>& args) {
  std::vector<std::string> all = {furlong_binary().string()};
  all.insert(all.end(), args.begin(), args.end());
  return run_command(command_line(all) + " 2>&1");
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The arguments of miles' scripts/run_qwen3_0_6b_fsdp.py, group by group in its order (with
// the wandb group it adds when WANDB_API_KEY is set, and --use-fault-tolerance from the version
// of the script that has it). Changed: paths, and the sizes marked "was".
std::vector<std::string> qwen3_0_6b_fsdp_recipe(const Fixture& f) {
  const std::string model = f.model.string();
  std::vector<std::string> args = {
      // ckpt_args
      "--hf-checkpoint", model, "--ref-load", model,
      // rollout_args
      "--prompt-data", f.prompts.string(), "--input-key", "prompt", "--label-key", "label",
      "--apply-chat-template", "--rollout-shuffle", "--balance-data", "--rm-type", "deepscaler",
      "--num-rollout", "2",                                       // was 100
      "--rollout-batch-size", "4",                                // was 32
      "--n-samples-per-prompt", "4",                              // was 8
      "--rollout-max-response-len", "8",                          // was 4096
      "--rollout-temperature", "1", "--global-batch-size", "16",  // was 256
      // eval_args
      "--eval-interval", "2",                                                             // was 10
      "--eval-prompt-data", "aime", f.eval.string(), "--n-samples-per-eval-prompt", "2",  // was 16
      "--eval-max-response-len", "8",  // was 4096
      "--eval-top-p", "1",
      // grpo_args
      "--use-kl-loss", "--advantage-estimator", "grpo", "--kl-loss-coef", "0.00", "--kl-loss-type",
      "low_var_kl", "--kl-coef", "0.00", "--entropy-coef", "0.00", "--eps-clip", "0.2",
      "--eps-clip-high", "0.28",
      // optimizer_args
      "--optimizer", "adam", "--lr", "1e-6", "--lr-decay-style", "constant", "--weight-decay",
      "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.98",
      // wandb_args
      "--use-wandb", "--wandb-project", "miles-fsdp-curve", "--wandb-group",
      "qwen3-0.6B-fsdp-dapo4k",
      // sglang_args
      "--rollout-num-gpus-per-engine", "1", "--sglang-decode-log-interval", "1000",
      "--sglang-mem-fraction-static", "0.75", "--sglang-attention-backend", "fa3",
      "--sglang-chunked-prefill-size", "4096",
      // train_backend_args
      "--train-backend", "fsdp", "--update-weight-buffer-size", "536870912",
      "--gradient-checkpointing", "--attn-implementation", "flash_attention_3", "--train-env-vars",
      R"({"PYTORCH_CUDA_ALLOC_CONF":"expandable_segments:True"})",
      // perf_args
      "--use-dynamic-batch-size", "--max-tokens-per-gpu", "9216",
      // misc_args
      "--actor-num-nodes", "1", "--actor-num-gpus-per-node",
      "2",  // was 4 (the script's num_gpus_per_node)
      "--colocate", "--use-fault-tolerance"};
  return args;
}

// The default (mode normal, FSDP) arguments of miles' scripts/run_qwen3_4b_fsdp.py, with the
// wandb flags its get_default_wandb_args adds when WANDB_API_KEY is set. Changed: paths, and
// the sizes marked "was".
std::vector<std::string> qwen3_4b_fsdp_recipe(const Fixture& f, const fs::path& out) {
  const std::string ckpt = (out / "checkpoints").string();
  return {
      // ckpt_args
      "--hf-checkpoint", f.model.string(), "--load", ckpt, "--save", ckpt, "--save-interval",
      "1",                            // was 20
      "--save-retain-interval", "1",  // was 20
      // rollout_args
      "--prompt-data", f.prompts.string(), "--input-key", "prompt", "--label-key", "label",
      "--apply-chat-template", "--rollout-shuffle", "--rm-type", "math", "--num-rollout",
      "2",                                                          // was 3000
      "--rollout-batch-size", "4",                                  // was 32
      "--n-samples-per-prompt", "4",                                // was 8
      "--rollout-max-response-len", "8",                            // was 8192
      "--rollout-temperature", "0.8", "--global-batch-size", "16",  // was 256
      "--balance-data",
      // optimizer_args, grpo_args
      "--optimizer", "adam", "--lr", "1e-6", "--lr-decay-style", "constant", "--weight-decay",
      "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.98", "--advantage-estimator", "grpo",
      "--kl-loss-coef", "0.00", "--kl-loss-type", "low_var_kl", "--entropy-coef", "0.00",
      "--eps-clip", "0.2", "--eps-clip-high", "0.28",
      // get_default_wandb_args
      "--use-wandb", "--wandb-project", "miles-run_qwen3_4b_fsdp", "--wandb-group",
      "241202-020000-123", "--wandb-key", "not-a-real-key", "--disable-wandb-random-suffix",
      // perf_args (fsdp)
      "--use-dynamic-batch-size", "--max-tokens-per-gpu", "32768",
      // eval_args
      "--eval-interval", "2",                                                             // was 20
      "--eval-prompt-data", "aime", f.eval.string(), "--n-samples-per-eval-prompt", "2",  // was 16
      "--eval-max-response-len", "8",  // was 16384
      "--eval-top-p", "0.7",
      // sglang_args
      "--rollout-num-gpus-per-engine", "1", "--sglang-chunked-prefill-size", "4096",
      "--sglang-mem-fraction-static", "0.75",
      // train_backend_args (fsdp)
      "--train-backend", "fsdp", "--attn-implementation", "flash_attention_2",
      "--gradient-checkpointing", "--update-weight-buffer-size", "536870912", "--train-env-vars",
      R"({"PYTORCH_CUDA_ALLOC_CONF":"expandable_segments:True"})",
      // misc_args
      "--actor-num-nodes", "1", "--actor-num-gpus-per-node",
      "1",                         // was 8 (the hardware's GPUs per node)
      "--num-gpus-per-node", "1",  // was 8
      "--colocate", "--use-fault-tolerance", "--dump-details", (out / "dump_details").string()};
}

// `args` without the flags of kFlagsPendingOtherWork and their values.
std::vector<std::string> without_pending(const std::vector<std::string>& args) {
  std::vector<std::string> kept;
  bool skipping = false;
  for (const auto& a : args) {
    if (a.rfind("--", 0) == 0) skipping = kFlagsPendingOtherWork.count(a) > 0;
    if (!skipping) kept.push_back(a);
  }
  return kept;
}

TEST(MilesRecipe, EveryFlagOfMilesFsdpRecipesIsAFlagOfFurlongTrain) {
  auto help = furlong({"train", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.output;
  std::ifstream in(source_dir() / "tests/e2e/data/miles_fsdp_recipe_flags.tsv");
  ASSERT_TRUE(in) << "fixture missing";
  size_t checked = 0;
  std::set<std::string> sources;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string flag = line.substr(0, tab);
    for (const auto& file : split(line.substr(tab + 1), ',')) sources.insert(file);
    if (kFlagsPendingOtherWork.count(flag)) {
      std::printf("pending (not checked): %s\n", flag.c_str());
      continue;
    }
    const std::string name = flag.substr(2);
    const bool listed = help.output.find("  --" + name + " ") != std::string::npos ||
                        help.output.find("  --[no-]" + name + " ") != std::string::npos ||
                        help.output.find("  --[no-]" + name + "\n") != std::string::npos;
    EXPECT_TRUE(listed) << flag << " (" << line.substr(tab + 1)
                        << ") is not a flag of furlong train";
    ++checked;
  }
  EXPECT_GE(checked + kFlagsPendingOtherWork.size(), 100u);
  EXPECT_GE(sources.size(), 15u);  // 4 scripts, 2 example scripts, 10 tests, the wandb helper
}

TEST(MilesRecipe, TrulyUnknownFlagsStillFailWithDidYouMean) {
  auto r = furlong({"train", "--sglang-mem-fraction-statik", "0.7"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown flag --sglang-mem-fraction-statik (did you mean "
                          "--sglang-mem-fraction-static?)"),
            std::string::npos)
      << r.output;
}

TEST(MilesRecipe, Qwen3_0_6bFsdpRecipeRunsAsWritten) {
  const auto& f = fixture();
  auto dir = scratch_dir();
  auto args = without_pending(qwen3_0_6b_fsdp_recipe(f));
  // The one flag the test adds: where it reads the run's metrics from.
  args.insert(args.end(), {"--metrics-file", (dir / "metrics.jsonl").string()});
  args.insert(args.begin(), "train");
  auto r = furlong(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Each flag that cannot apply here logs exactly one line saying what runs instead.
  for (const std::string line :
       {"--attn-implementation flash_attention_3: furlong has no FlashAttention kernels; the "
        "trainer and the engines use sdpa",
        "--sglang-attention-backend fa3: furlong's engine has no SGLang attention backends",
        "--use-fault-tolerance: furlong has no fault-tolerance controller",
        "--use-wandb: furlong cannot reach a wandb server (project miles-fsdp-curve, group "
        "qwen3-0.6B-fsdp-dapo4k); metrics go to --metrics-file ",
        "--train-env-vars: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}) {
    EXPECT_EQ(count(r.output, line), 1u) << line << "\n" << r.output;
  }
  std::vector<Json> rows;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(Json::parse(line));
  ASSERT_GE(rows.size(), 2u) << r.output;
  bool trained = false, evaluated = false;
  for (const auto& row : rows) {
    trained = trained || row.contains("train/loss");
    evaluated = evaluated || row.contains("eval/aime");
  }
  EXPECT_TRUE(trained) << rows.back().dump();
  EXPECT_TRUE(evaluated) << rows.back().dump();
}

TEST(MilesRecipe, Qwen3_4bFsdpRecipeRunsAsWritten) {
  const auto& f = fixture();
  auto dir = scratch_dir();
  auto args = without_pending(qwen3_4b_fsdp_recipe(f, dir));
  args.insert(args.begin(), "train");
  auto r = furlong(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& line : std::vector<std::string>{
           "--attn-implementation flash_attention_2: furlong has no FlashAttention kernels",
           "--use-wandb: furlong cannot reach a wandb server (project miles-run_qwen3_4b_fsdp, "
           "group "
           "241202-020000-123); metrics go to the console only",
           "--dump-details " + (dir / "dump_details").string() +
               ": furlong writes each rollout's samples to",
           "--save-retain-interval 1: furlong deletes no checkpoint",
           "--num-gpus-per-node 1: not used by furlong"}) {
    EXPECT_EQ(count(r.output, line), 1u) << line << "\n" << r.output;
  }
  EXPECT_EQ(r.output.find("not-a-real-key"), std::string::npos) << "the wandb key was printed";
  for (int rollout : {0, 1}) {
    EXPECT_TRUE(
        fs::exists(dir / "dump_details" / "rollout_data" / (std::to_string(rollout) + ".json")))
        << rollout;
  }
  // --save-interval 1 over 2 rollouts: both checkpoints kept.
  EXPECT_TRUE(fs::is_directory(dir / "checkpoints" / "iter_0000001"));
  EXPECT_TRUE(fs::is_directory(dir / "checkpoints" / "iter_0000002"));
}

// miles' --sglang-* engine flags set the engines' options, colocated and in spawned servers.
TEST(MilesRecipe, SglangEngineFlagsReachTheEngines) {
  const auto& f = fixture();
  for (const bool colocate : {true, false}) {
    SCOPED_TRACE(colocate ? "colocated" : "disaggregated");
    std::vector<std::string> args = {"train",
                                     "--hf-checkpoint",
                                     f.model.string(),
                                     "--prompt-data",
                                     f.prompts.string(),
                                     "--input-key",
                                     "prompt",
                                     "--label-key",
                                     "label",
                                     "--rm-type",
                                     "math",
                                     "--num-rollout",
                                     "1",
                                     "--rollout-batch-size",
                                     "4",
                                     "--n-samples-per-prompt",
                                     "2",
                                     "--rollout-max-response-len",
                                     "4",
                                     "--sglang-max-total-tokens",
                                     "512",
                                     "--sglang-max-running-requests",
                                     "3",
                                     "--sglang-decode-log-interval",
                                     "1",
                                     "--sglang-disable-radix-cache",
                                     "--sglang-chunked-prefill-size",
                                     "16",
                                     "--sglang-context-length",
                                     "48"};
    if (colocate) args.push_back("--colocate");
    auto r = furlong(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("engine: KV cache 512 tokens"), std::string::npos) << r.output;
    // 8 requests, at most 3 decoded together.
    EXPECT_NE(r.output.find(" 3 running"), std::string::npos) << r.output;
    for (const char* too_many : {" 4 running", " 5 running", " 8 running"})
      EXPECT_EQ(r.output.find(too_many), std::string::npos) << r.output;
  }
}

// Each case must fail naming its flag, before the model is read: the checkpoint path does not
// exist, so an error about anything else proves the check ran first.
TEST(MilesRecipe, FlagsThatNeedNoModelFailBeforeAnythingLoads) {
  const std::string missing_model = "/nonexistent/furlong-ckpt-never-read";
  auto dir = scratch_dir();
  std::ofstream(dir / "p.jsonl") << R"({"input": "1+1=", "label": "2"})"
                                 << "\n";
  struct Case {
    std::vector<std::string> flags;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--rm-type", "deepscalr"},
       "--rm-type: unknown reward type 'deepscalr' (did you mean 'deepscaler'?)"},
      {{"--metrics-file", "/nonexistent-dir/m.jsonl"}, "--metrics-file /nonexistent-dir/m.jsonl"},
      {{"--report", "/nonexistent-dir/r.html"}, "--report /nonexistent-dir/r.html"},
      {{"--custom-tis-function-path", "mis.compute_mis_weights_fsdp"},
       "--custom-tis-function-path is not available"},
      {{"--use-rs"}, "--use-rs is not available"},
      {{"--eval-config", "eval.yaml"}, "--eval-config is not available"},
      {{"--multimodal-keys", R"({"image": "images"})"}, "--multimodal-keys is not available"},
      {{"--update-weight-transfer-mode", "disk-delta"}, "--update-weight-transfer-mode disk-delta"},
      {{"--true-on-policy-mode", "--no-engine-exact-logprobs"}, "--true-on-policy-mode"},
      {{"--apply-chat-template-kwargs", "[1]"}, "--apply-chat-template-kwargs: expected a JSON"},
      {{"--apply-chat-template-kwargs", R"({"messages": 1})"},
       "--apply-chat-template-kwargs: "
       "'messages'"},
      {{"--chat-template-path", "/nonexistent/t.jinja"}, "--chat-template-path /nonexistent"},
      {{"--train-env-vars", "FOO=1"}, "--train-env-vars: expected a JSON object"},
      {{"--bf16", "--fp16"}, "--bf16 and --fp16"},
      {{"--qkv-format", "bshd"}, "--qkv-format bshd is not available"},
      {{"--disable-compute-advantages-and-returns"}, "--disable-compute-advantages-and-returns"},
      {{"--attn-implementation", "flash_attention_4"}, "--attn-implementation: invalid choice"},
      // conflicting flags
      {{"--use-rollout-logprobs", "--use-tis"}, "--use-rollout-logprobs and --use-tis"},
      {{"--save-interval", "5"}, "--save-interval requires --save"},
      {{"--ci-test", "--ci-save-grad-norm", "g.pt"}, "--ci-save-grad-norm is not available"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"train",         "--hf-checkpoint",          missing_model,
                                     "--prompt-data", (dir / "p.jsonl").string(), "--rm-type",
                                     "math"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    auto r = furlong(args);
    SCOPED_TRACE(c.flags.front());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("ckpt-never-read"), std::string::npos) << r.output;
  }
}

TEST(MilesRecipe, SaveWithoutSaveIntervalSavesNothingAsInMilesAndWarns) {
  const auto& f = fixture();
  auto dir = scratch_dir();
  auto run = [&](const fs::path& save, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "train", "--hf-checkpoint", f.model.string(), "--prompt-data", f.prompts.string(),
        "--input-key", "prompt", "--label-key", "label", "--rm-type", "math", "--colocate",
        "--num-rollout", "1", "--rollout-batch-size", "2", "--n-samples-per-prompt", "2",
        "--rollout-max-response-len", "2", "--save", save.string(),
        // created like TensorBoard's writers create theirs
        "--tensorboard-dir", (save.parent_path() / "tb" / save.filename()).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return furlong(args);
  };
  const std::string warning =
      "is set without --save-interval: as in miles, no checkpoint is "
      "written during or at the end of the run";
  auto r = run(dir / "no_interval", {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, warning), 1u) << r.output;
  EXPECT_FALSE(fs::exists(dir / "no_interval" / "latest_checkpointed_iteration.txt"));
  EXPECT_TRUE(fs::is_directory(dir / "tb" / "no_interval"));

  r = run(dir / "interval", {"--save-interval", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, warning), 0u) << r.output;
  EXPECT_TRUE(fs::exists(dir / "interval" / "latest_checkpointed_iteration.txt"));
}

}  // namespace
}  // namespace furlong::testing
