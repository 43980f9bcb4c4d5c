// Compatibility with the reference implementation, the Python `safetensors` package, through
// scripts/oracles/safetensors_roundtrip.py: files it writes read identically here, files and HF
// directories written here read identically there, and the writer's output is byte-identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace furlong::io {
namespace {

namespace fs = std::filesystem;
using testing::make_tensor;
using testing::read_bytes;
using testing::tensor_hex;

const char* kOracle = "oracles/safetensors_roundtrip.py";

// The oracle's expectation format: {"tensors": {name: {dtype, shape, hex}}, "metadata": {..}}.
Json describe(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  Json out = {{"tensors", Json::object()}, {"metadata", Json::object()}};
  for (const auto& [name, t] : tensors) {
    out["tensors"][name] = {{"dtype", dtype_to_safetensors(t.scalar_type())},
                            {"shape", t.sizes().vec()},
                            {"hex", tensor_hex(t)}};
  }
  for (const auto& [key, value] : metadata) out["metadata"][key] = value;
  return out;
}

// Checks every tensor `expected` describes against `get(name)`.
void expect_matches(const Json& expected,
                    const std::function<at::Tensor(const std::string&)>& get) {
  for (const auto& [name, want] : expected["tensors"].items()) {
    SCOPED_TRACE(name);
    at::Tensor t = get(name);
    EXPECT_EQ(dtype_to_safetensors(t.scalar_type()), want["dtype"].get<std::string>());
    EXPECT_EQ(t.sizes().vec(), want["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(tensor_hex(t), want["hex"].get<std::string>());
  }
}

TEST(SafetensorsOracle, ReadsFilesWrittenByPython) {
  auto dir = furlong::testing::scratch_dir();
  furlong::testing::run_python(kOracle, {"write-fixtures", dir.string()});
  Json expected = read_json_file(dir / "dtypes.json");
  auto file = SafetensorsFile::open(dir / "dtypes.safetensors");
  EXPECT_EQ(file->tensors().size(), expected["tensors"].size());
  expect_matches(expected, [&](const std::string& name) { return file->tensor(name); });
  EXPECT_EQ(file->metadata(), (expected["metadata"].get<std::map<std::string, std::string>>()));
}

TEST(SafetensorsOracle, RewritingAPythonFileIsByteIdentical) {
  auto dir = furlong::testing::scratch_dir();
  furlong::testing::run_python(kOracle, {"write-fixtures", dir.string()});
  auto file = SafetensorsFile::open(dir / "dtypes.safetensors");
  NamedTensors tensors;
  for (const auto& info : file->tensors()) tensors.emplace_back(info.name, file->tensor(info.name));
  std::reverse(tensors.begin(), tensors.end());  // input order must not matter
  // One metadata key: the reference orders several keys by hash, i.e. unpredictably.
  save_safetensors(dir / "rewritten.safetensors", tensors, {{"format", "pt"}});
  EXPECT_TRUE(read_bytes(dir / "rewritten.safetensors") ==
              read_bytes(dir / "dtypes_pt.safetensors"));
}

TEST(SafetensorsOracle, PythonReadsFilesWrittenHere) {
  auto dir = furlong::testing::scratch_dir();
  NamedTensors tensors;
  int64_t seed = 0;
  for (auto dtype : testing::all_dtypes()) {
    std::string name = dtype_to_safetensors(dtype);
    tensors.emplace_back("w." + name, make_tensor(dtype, {4, 7}, ++seed));
    tensors.emplace_back("s." + name, make_tensor(dtype, {}, ++seed));
    tensors.emplace_back("e." + name, make_tensor(dtype, {0}, ++seed));
  }
  tensors.emplace_back("t.view", make_tensor(at::kBFloat16, {6, 5}, 7).t());
  tensors.emplace_back("unicode.名前", make_tensor(at::kFloat, {2}, 8));
  tensors.emplace_back("quote\"back\\slash\n", make_tensor(at::kFloat, {2}, 9));
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"json", "{\"a\": 1}"}};
  save_safetensors(dir / "furlong.safetensors", tensors, metadata);
  write_file_atomic(dir / "expect.json", describe(tensors, metadata).dump());
  auto out = furlong::testing::run_python(
      kOracle, {"check", (dir / "furlong.safetensors").string(), (dir / "expect.json").string()});
  EXPECT_HAS(out, "ok");
}

TEST(SafetensorsOracle, ReadsShardedDirectoryFromHuggingfaceHub) {
  auto dir = furlong::testing::scratch_dir() / "model";
  furlong::testing::run_python(kOracle, {"write-sharded", dir.string()});
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  ASSERT_TRUE(fs::exists(dir / "model-00002-of-00004.safetensors"));
  Json expected = read_json_file(dir.string() + ".json");
  auto weights = HfWeights::open(dir);
  EXPECT_EQ(weights.names().size(), expected["tensors"].size());
  expect_matches(expected, [&](const std::string& name) { return weights.get(name); });
}

TEST(SafetensorsOracle, PythonReadsHfDirectoriesWrittenHere) {
  auto root = furlong::testing::scratch_dir();
  NamedTensors tensors = {{"model.embed_tokens.weight", make_tensor(at::kBFloat16, {64, 8}, 1)}};
  for (int layer = 0; layer < 4; ++layer) {
    std::string p = "model.layers." + std::to_string(layer) + ".";
    tensors.emplace_back(p + "mlp.gate_proj.weight", make_tensor(at::kBFloat16, {16, 8}, layer));
    tensors.emplace_back(p + "post_attention_layernorm.weight", make_tensor(at::kFloat, {8}, 2));
  }
  write_file_atomic(root / "expect.json", describe(tensors, {}).dump());
  for (uint64_t max_shard_bytes : {uint64_t{1} << 30, uint64_t{600}}) {
    SCOPED_TRACE(max_shard_bytes);
    auto dir = root / ("max" + std::to_string(max_shard_bytes));
    save_hf_weights(dir, tensors, max_shard_bytes);
    EXPECT_EQ(fs::exists(dir / "model.safetensors.index.json"), max_shard_bytes == 600);
    auto out = furlong::testing::run_python(
        kOracle, {"check-hf", dir.string(), (root / "expect.json").string()});
    EXPECT_HAS(out, "ok");
  }
}

}  // namespace
}  // namespace furlong::io
