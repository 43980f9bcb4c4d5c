// Unit tests for src/core: error messages, JSON field access, atomic writes, string helpers.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "core/dtype.h"
#include "core/files.h"
#include "core/json_util.h"
#include "core/strings.h"

namespace furlong {
namespace {

using testing::error_of;

TEST(JsonUtil, ParseErrorNamesSourceLineAndColumn) {
  auto msg = error_of([] { parse_json("{\n  \"a\": 1,\n  \"b\": }", "cfg.json"); });
  EXPECT_NE(msg.find("cfg.json: invalid JSON at line 3"), std::string::npos) << msg;
}

TEST(JsonUtil, TypedFieldErrorsNameFieldAndType) {
  Json j = parse_json(R"({"hidden_size": "64", "eps": 1e-6, "n": -3})", "config.json");
  auto msg = error_of([&] { json_get<int64_t>(j, "hidden_size", "config.json"); });
  EXPECT_NE(msg.find("field 'hidden_size' must be an integer, got string \"64\""),
            std::string::npos)
      << msg;
  msg = error_of([&] { json_get<int64_t>(j, "vocab_size", "config.json"); });
  EXPECT_NE(msg.find("required field 'vocab_size' is missing"), std::string::npos) << msg;
  EXPECT_DOUBLE_EQ(json_get<double>(j, "eps", "c"), 1e-6);
  EXPECT_EQ(json_get_or<int64_t>(j, "missing", 7, "c"), 7);
  msg = error_of([&] { json_get<uint64_t>(j, "n", "c"); });
  EXPECT_NE(msg.find("non-negative integer"), std::string::npos) << msg;
}

TEST(Files, AtomicWriteReplacesContentAndLeavesNoTemporaries) {
  auto dir = testing::scratch_dir();
  write_file_atomic(dir / "a.txt", "first");
  write_file_atomic(dir / "a.txt", "second");
  EXPECT_EQ(read_file(dir / "a.txt"), "second");
  int n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir)) ++n;
  EXPECT_EQ(n, 1);
  auto msg = error_of([&] { read_file(dir / "missing.txt"); });
  EXPECT_NE(msg.find("missing.txt: cannot open"), std::string::npos) << msg;
}

TEST(Strings, ClosestMatchSuggestsTyposOnly) {
  std::vector<std::string> keys = {"weight_decay", "lr", "adam_beta1", "global_batch_size"};
  EXPECT_EQ(closest_match("weight_decy", keys).value_or(""), "weight_decay");
  EXPECT_EQ(closest_match("global_batchsize", keys).value_or(""), "global_batch_size");
  EXPECT_FALSE(closest_match("completely_unrelated", keys).has_value());
  EXPECT_EQ(closest_match("lr", keys).value_or(""), "lr");
  EXPECT_EQ(edit_distance("inptu", "input"), 1u);  // a transposition is one edit
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(trim("  x y \n"), "x y");
}

TEST(Dtype, ParsesUserSpellingsAndRejectsOthers) {
  EXPECT_EQ(parse_dtype("bf16", "--dtype"), c10::kBFloat16);
  EXPECT_EQ(parse_dtype("float32", "--dtype"), c10::kFloat);
  auto msg = error_of([] { parse_dtype("int8", "--dtype"); });
  EXPECT_NE(msg.find("--dtype: unknown dtype 'int8'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace furlong
