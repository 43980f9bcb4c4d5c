// `furlong generate` end to end on a tiny model (created by `furlong init-model` with the real
// Qwen3 tokenizer, so text and chat rows work): rows in input order with n-samples rows per
// prompt, every field present and consistent, reproducible for a seed, and bad input rows
// rejected with an error naming the file and line; non-finite log-probs written as null (valid
// JSON); a directory given as --input (generate and score) rejected naming the path.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>

#include "common/test_util.h"
#include "common/tiny_models.h"
#include "core/files.h"
#include "core/json_util.h"
#include "core/jsonl.h"

namespace furlong {
namespace {

namespace fs = std::filesystem;
using testing::furlong_binary;
using testing::run_command;
using testing::shell_quote;

class GenerateCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto config =
        testing::tiny_model_config(testing::TinyFamily::kQwen3, {{"hidden_size", 32},
                                                                 {"intermediate_size", 64},
                                                                 {"head_dim", 8},
                                                                 {"max_position_embeddings", 256}});
    // Seed 1234: init-model's default.
    model_ = new fs::path(testing::init_model(testing::scratch_dir(), "model", config,
                                              testing::tokenizer_dir("qwen3"), 1234));
  }
  static void TearDownTestSuite() { delete model_; }

  static testing::CommandResult generate(const fs::path& in, const fs::path& out,
                                         const std::string& extra) {
    return run_command(shell_quote(furlong_binary().string()) + " generate --hf-checkpoint " +
                       shell_quote(model_->string()) + " --input " + shell_quote(in.string()) +
                       " --output " + shell_quote(out.string()) + " " + extra + " 2>&1");
  }
  static fs::path* model_;
};
fs::path* GenerateCommand::model_ = nullptr;

TEST_F(GenerateCommand, WritesRowsInOrderWithAllFields) {
  auto dir = testing::scratch_dir();
  write_file_atomic(dir / "in.jsonl",
                    "{\"input_ids\": [1, 2, 3, 4]}\n"
                    "{\"text\": \"The capital of France is\"}\n"
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi there\"}]}\n");
  const std::string flags =
      "--n-samples 2 --temperature 0.8 --top-p 0.95 --max-new-tokens 6 "
      "--seed 5 --ignore-eos";
  auto r = generate(dir / "in.jsonl", dir / "out.jsonl", flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_jsonl(dir / "out.jsonl");
  ASSERT_EQ(rows.size(), 6u);
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto& v = rows[k].value;
    EXPECT_EQ(v["index"].get<int64_t>(), static_cast<int64_t>(k / 2));
    EXPECT_EQ(v["sample_index"].get<int64_t>(), static_cast<int64_t>(k % 2));
    auto ids = v["output_ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(ids.size(), 6u);
    EXPECT_EQ(v["logprobs"].size(), ids.size());
    for (const auto& lp : v["logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
    EXPECT_TRUE(v["text"].is_string());
    EXPECT_EQ(v["finish_reason"], "length");
    EXPECT_GT(v["prompt_tokens"].get<int64_t>(), 0);
  }
  EXPECT_EQ(rows[0].value["prompt_tokens"].get<int64_t>(), 4);
  // The chat row went through the template (role markers are several tokens).
  EXPECT_GT(rows[4].value["prompt_tokens"].get<int64_t>(), 5);
  // Reproducible for a seed, bit for bit: generate queues every request at once
  // (Engine::submit_all), so both runs form the same batches and round every logit alike. (The
  // near-uniform distribution of this random model over a 152k vocabulary would turn any
  // last-bit difference into a different token within a few draws.)
  auto again = generate(dir / "in.jsonl", dir / "again.jsonl", flags);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  auto rows2 = read_jsonl(dir / "again.jsonl");
  ASSERT_EQ(rows2.size(), rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    EXPECT_EQ(rows[k].value["output_ids"], rows2[k].value["output_ids"]) << "row " << k;
    EXPECT_EQ(rows[k].value["text"], rows2[k].value["text"]) << "row " << k;
    EXPECT_EQ(rows[k].value["logprobs"], rows2[k].value["logprobs"]) << "row " << k;
  }
}

TEST_F(GenerateCommand, BadRowsNameTheLine) {
  auto dir = testing::scratch_dir();
  struct Case {
    std::string second_line;
    std::string expect;
  };
  for (const auto& c : {Case{"{\"input_ids\": [1, \"x\"]}", "input_ids"},
                        Case{"{\"prompt\": \"hello\"}", "expected a field"},
                        Case{"{\"input_ids\": [1, 99999999]}", "outside the vocabulary"},
                        Case{"not json", "in.jsonl:2"}}) {
    write_file_atomic(dir / "in.jsonl", "{\"input_ids\": [1, 2]}\n" + c.second_line + "\n");
    auto r = generate(dir / "in.jsonl", dir / "out.jsonl", "--max-new-tokens 2");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("in.jsonl:2"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out.jsonl"));
  }
  auto r = generate(dir / "in.jsonl", dir / "out.jsonl", "--top-p 1.5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--top-p"), std::string::npos) << r.output;
}

// Overwrites every float32 value of tensor `name` in the safetensors files of `dir` with NaN.
void poison_tensor(const fs::path& dir, const std::string& name) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    std::string bytes = read_file(entry.path());
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    Json header = parse_json(std::string_view(bytes).substr(8, header_len), "header");
    if (!header.contains(name)) continue;
    ASSERT_EQ(header[name]["dtype"], "F32");
    auto begin = header[name]["data_offsets"][0].get<size_t>();
    auto end = header[name]["data_offsets"][1].get<size_t>();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t at = 8 + header_len + begin; at < 8 + header_len + end; at += 4)
      std::memcpy(bytes.data() + at, &nan, 4);
    write_file_atomic(entry.path(), bytes);
    return;
  }
  FAIL() << "no tensor " << name << " in " << dir;
}

TEST_F(GenerateCommand, NonFiniteLogprobsAreWrittenAsNullSoTheOutputIsValidJson) {
  auto dir = testing::scratch_dir();
  fs::copy(*model_, dir / "nan_model", fs::copy_options::recursive);
  poison_tensor(dir / "nan_model", "model.norm.weight");
  write_file_atomic(dir / "in.jsonl", "{\"input_ids\": [1, 2, 3]}\n");
  auto r = run_command(shell_quote(furlong_binary().string()) + " generate --hf-checkpoint " +
                       shell_quote((dir / "nan_model").string()) + " --input " +
                       shell_quote((dir / "in.jsonl").string()) + " --output " +
                       shell_quote((dir / "out.jsonl").string()) +
                       " --temperature 0 --max-new-tokens 3 --ignore-eos 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_jsonl(dir / "out.jsonl");  // strict JSON: NaN would not parse
  ASSERT_EQ(rows.size(), 1u);
  const auto& logprobs = rows[0].value["logprobs"];
  ASSERT_EQ(logprobs.size(), 3u) << logprobs.dump();
  for (const auto& lp : logprobs) EXPECT_TRUE(lp.is_null()) << logprobs.dump();
}

TEST_F(GenerateCommand, DirectoryInputIsAnErrorNamingThePath) {
  auto dir = testing::scratch_dir();
  fs::create_directories(dir / "prompts");
  for (const std::string command : {"generate", "score"}) {
    auto r = run_command(shell_quote(furlong_binary().string()) + " " + command +
                         " --hf-checkpoint " + shell_quote(model_->string()) + " --input " +
                         shell_quote((dir / "prompts").string()) + " --output " +
                         shell_quote((dir / "out.jsonl").string()) + " 2>&1");
    EXPECT_NE(r.exit_code, 0) << command << ": " << r.output;
    EXPECT_NE(r.output.find((dir / "prompts").string() + ": is a directory; expected a JSONL file"),
              std::string::npos)
        << command << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir / "out.jsonl"));
  }
}

}  // namespace
}  // namespace furlong
