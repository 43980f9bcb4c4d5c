// HF model directories: single-file and sharded layouts written by save_hf_weights and read by
// HfWeights, stale-file cleanup, and the errors for broken directories and indexes.
#include <gtest/gtest.h>

#include <algorithm>
#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace furlong::io {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::make_tensor;
using testing::same_bytes;

// A small model-like state dict: 2 + 3 * 3 tensors of mixed dtypes, 3584 bytes in total.
NamedTensors small_model() {
  NamedTensors tensors = {{"model.embed_tokens.weight", make_tensor(at::kBFloat16, {32, 16}, 1)}};
  for (int layer = 0; layer < 3; ++layer) {
    std::string p = "model.layers." + std::to_string(layer) + ".";
    tensors.emplace_back(p + "self_attn.q_proj.weight", make_tensor(at::kBFloat16, {16, 16}, 2));
    tensors.emplace_back(p + "input_layernorm.weight", make_tensor(at::kFloat, {16}, 3));
    tensors.emplace_back(p + "mlp.up_proj.weight", make_tensor(at::kBFloat16, {8, 16}, 4));
  }
  tensors.emplace_back("model.norm.weight", make_tensor(at::kFloat, {16}, 5));
  return tensors;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void expect_same_weights(const HfWeights& weights, const NamedTensors& tensors) {
  EXPECT_EQ(weights.names().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    ASSERT_TRUE(weights.contains(name)) << name;
    EXPECT_TRUE(same_bytes(weights.get(name), expected)) << name;
    EXPECT_EQ(weights.info(name).shape, expected.sizes().vec()) << name;
  }
}

TEST(HfWeights, SingleFileWhenEverythingFits) {
  auto dir = furlong::testing::scratch_dir() / "model";
  auto tensors = small_model();
  save_hf_weights(dir, tensors);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"model.safetensors"});
  auto weights = HfWeights::open(dir);
  expect_same_weights(weights, tensors);
  EXPECT_EQ(weights.file_of("model.norm.weight"), dir / "model.safetensors");
  auto file = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(HfWeights, ShardsAndIndexWhenOverTheLimit) {
  auto dir = furlong::testing::scratch_dir();
  auto tensors = small_model();
  tensors.emplace_back("lm_head.weight", make_tensor(at::kFloat, {32, 16}, 6));  // 2048 bytes
  save_hf_weights(dir, tensors, /*max_shard_bytes=*/1200);
  // embed (1024) | layer0 (512+64+256) | layer1 | layer2 + norm (64) | lm_head alone (> limit).
  EXPECT_EQ(files_in(dir),
            (std::vector<std::string>{
                "model-00001-of-00005.safetensors", "model-00002-of-00005.safetensors",
                "model-00003-of-00005.safetensors", "model-00004-of-00005.safetensors",
                "model-00005-of-00005.safetensors", "model.safetensors.index.json"}));
  Json index = read_json_file(dir / "model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 3584u + 2048u);
  EXPECT_EQ(index["weight_map"].size(), tensors.size());
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00004-of-00005.safetensors");
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], "model-00005-of-00005.safetensors");

  auto weights = HfWeights::open(dir);
  expect_same_weights(weights, tensors);
  EXPECT_EQ(weights.file_of("model.layers.1.mlp.up_proj.weight"),
            dir / "model-00003-of-00005.safetensors");
  auto shard = SafetensorsFile::open(dir / "model-00002-of-00005.safetensors");
  EXPECT_EQ(shard->metadata().at("format"), "pt");
  EXPECT_EQ(shard->tensors().size(), 3u);
}

TEST(HfWeights, ResavingRemovesStaleWeightFilesOnly) {
  auto dir = furlong::testing::scratch_dir();
  write_file_atomic(dir / "config.json", "{}");
  write_file_atomic(dir / "model-notes.safetensors.txt", "keep");
  auto tensors = small_model();
  save_hf_weights(dir, tensors, 1200);
  EXPECT_EQ(files_in(dir).size(), 4u + 1u + 2u);
  save_hf_weights(dir, tensors, 2000);  // fewer shards
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{
                               "config.json", "model-00001-of-00002.safetensors",
                               "model-00002-of-00002.safetensors", "model-notes.safetensors.txt",
                               "model.safetensors.index.json"}));
  save_hf_weights(dir, tensors);  // single file: the index must go, or it would win
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"config.json", "model-notes.safetensors.txt",
                                                     "model.safetensors"}));
  expect_same_weights(HfWeights::open(dir), tensors);
}

TEST(HfWeights, IndexTakesPrecedenceOverSingleFile) {
  auto dir = furlong::testing::scratch_dir();
  save_safetensors(dir / "model.safetensors", {{"stale", at::ones({1})}});
  save_safetensors(dir / "shard.safetensors", {{"fresh", at::ones({2})}});
  write_file_atomic(dir / "model.safetensors.index.json",
                    R"({"weight_map": {"fresh": "shard.safetensors"}})");
  auto weights = HfWeights::open(dir);
  EXPECT_EQ(weights.names(), std::vector<std::string>{"fresh"});
}

TEST(HfWeights, UnknownNameNamesDirectoryAndSuggests) {
  auto dir = furlong::testing::scratch_dir();
  save_hf_weights(dir, small_model());
  auto weights = HfWeights::open(dir);
  auto msg = error_of([&] { weights.get("model.norm.weigth"); });
  EXPECT_HAS(msg, dir.string() + ": the model weights have no tensor named 'model.norm.weigth'");
  EXPECT_HAS(msg, "did you mean 'model.norm.weight'?");
  msg = error_of([&] { weights.info("lm_head.weight"); });
  EXPECT_HAS(msg, "no tensor named 'lm_head.weight' (11 tensors)");
  EXPECT_FALSE(weights.contains("lm_head.weight"));
}

TEST(HfWeightsErrors, NoWeightsListsWhatWasLookedFor) {
  auto dir = furlong::testing::scratch_dir();
  write_file_atomic(dir / "pytorch_model.bin", "x");
  write_file_atomic(dir / "config.json", "{}");
  auto msg = error_of([&] { HfWeights::open(dir); });
  EXPECT_HAS(msg, dir.string() +
                      ": no model weights found: looked for "
                      "model.safetensors.index.json and model.safetensors");
  EXPECT_HAS(msg, "the directory holds pytorch_model.bin");
  msg = error_of([&] { HfWeights::open(dir / "absent"); });
  EXPECT_HAS(msg, "absent: not a directory");
}

TEST(HfWeightsErrors, MissingShardNamesIndexAndShard) {
  auto dir = furlong::testing::scratch_dir();
  save_hf_weights(dir, small_model(), 1200);
  fs::remove(dir / "model-00003-of-00004.safetensors");
  auto msg = error_of([&] { HfWeights::open(dir); });
  EXPECT_HAS(msg,
             "model.safetensors.index.json: shard 'model-00003-of-00004.safetensors' "
             "(listed for 3 tensors, e.g. 'model.layers.1.");
  EXPECT_HAS(msg, "does not exist in " + dir.string());
}

TEST(HfWeightsErrors, IndexPointingAtAbsentTensorNamesBoth) {
  auto dir = furlong::testing::scratch_dir();
  save_safetensors(dir / "model-00001-of-00001.safetensors", {{"a", at::ones({2})}});
  write_file_atomic(dir / "model.safetensors.index.json",
                    R"({"metadata": {"total_size": 8}, "weight_map": {)"
                    R"("a": "model-00001-of-00001.safetensors", )"
                    R"("lm_head.weight": "model-00001-of-00001.safetensors"}})");
  auto msg = error_of([&] { HfWeights::open(dir); });
  EXPECT_HAS(msg,
             "model.safetensors.index.json: tensor 'lm_head.weight' is mapped to shard "
             "'model-00001-of-00001.safetensors', but " +
                 (dir / "model-00001-of-00001.safetensors").string() +
                 " has no tensor of that name");
}

TEST(HfWeightsErrors, MalformedIndex) {
  auto dir = furlong::testing::scratch_dir();
  auto index = dir / "model.safetensors.index.json";
  auto open_with = [&](const std::string& text) {
    write_file_atomic(index, text);
    return error_of([&] { HfWeights::open(dir); });
  };
  EXPECT_HAS(open_with("{\"weight_map\": "), "model.safetensors.index.json: invalid JSON");
  EXPECT_HAS(open_with("[]"), "model.safetensors.index.json: expected a JSON object, got array");
  EXPECT_HAS(open_with("{}"), "index.json: required field 'weight_map' is missing");
  EXPECT_HAS(open_with(R"({"weight_map": ["a"]})"),
             "index.json: 'weight_map' must be an object mapping tensor names to shard files");
  EXPECT_HAS(open_with(R"({"weight_map": {"a": 3}})"),
             "index.json: weight_map['a'] must be a shard file name, got integer 3");
  EXPECT_HAS(open_with(R"({"weight_map": {"a": "../x.safetensors"}})"),
             "weight_map['a'] = '../x.safetensors' must name a file inside the model directory");
  // A corrupt shard reports the shard's own problem.
  write_file_atomic(dir / "bad.safetensors", "short");
  EXPECT_HAS(open_with(R"({"weight_map": {"a": "bad.safetensors"}})"),
             "bad.safetensors: file is 5 bytes");
}

TEST(HfWeightsErrors, SaveRejectsDuplicateNamesAcrossShards) {
  auto dir = furlong::testing::scratch_dir();
  NamedTensors tensors = {{"a", at::ones({100})}, {"b", at::ones({100})}, {"a", at::ones({1})}};
  auto msg = error_of([&] { save_hf_weights(dir, tensors, 100); });
  EXPECT_HAS(msg, dir.string() + ": tensor name 'a' is used twice");
  EXPECT_TRUE(files_in(dir).empty());
}

}  // namespace
}  // namespace furlong::io
