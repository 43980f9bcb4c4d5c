// Input that is hostile by shape rather than by content: JSON nested 60,000 levels deep, numbers
// beyond a double, integers beyond their field's type, huge field names, non-finite floats on
// output, a directory given as a JSONL file. Each must be a furlong::Error (or valid output),
// never a crash, a hang or a silently changed value.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "core/jsonl.h"
#include "core/strings.h"

namespace furlong {
namespace {

using testing::error_of;

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::string nested_objects(size_t depth) {
  std::string text;
  for (size_t i = 0; i < depth; ++i) text += "{\"a\":";
  return text + "1" + std::string(depth, '}');
}

TEST(JsonBounds, DeeplyNestedInputIsAnErrorNamingTheSourceAndTheLimit) {
  // 60,000 levels: the probe that crashed `furlong serve` and the JSONL readers.
  for (const std::string& text : {nested_arrays(60000), nested_objects(60000)}) {
    auto msg = error_of([&] { parse_json(text, "request body"); });
    EXPECT_NE(msg.find("request body: JSON nested deeper than 128 levels"), std::string::npos)
        << msg.substr(0, 300);
    msg = error_of([&] { parse_ordered_json(text, "row"); });
    EXPECT_NE(msg.find("row: JSON nested deeper than 128"), std::string::npos)
        << msg.substr(0, 300);
  }
  EXPECT_NO_THROW(parse_json(nested_arrays(kMaxJsonDepth), "x"));
  EXPECT_THROW(parse_json(nested_arrays(kMaxJsonDepth + 1), "x"), Error);
  auto msg = error_of([] { parse_json(R"({"a": {"b": [[[1]]]}})", "cfg", 4); });
  EXPECT_NE(
      msg.find("cfg: JSON nested deeper than 4 levels of arrays/objects (inside field 'a.b')"),
      std::string::npos)
      << msg;
  EXPECT_NO_THROW(parse_json(R"({"a": {"b": [[1]]}})", "cfg", 4));
}

TEST(JsonBounds, DeeplyNestedJsonlRowIsAnErrorNamingFileAndLine) {
  auto dir = testing::scratch_dir();
  write_file_atomic(dir / "in.jsonl",
                    "{\"text\": \"ok\"}\n{\"x\": " + nested_arrays(60000) + "}\n");
  auto msg = error_of([&] { read_jsonl(dir / "in.jsonl"); });
  EXPECT_NE(msg.find("in.jsonl:2: JSON nested deeper than 128 levels of arrays/objects (inside "
                     "field 'x')"),
            std::string::npos)
      << msg.substr(0, 300);
}

TEST(JsonBounds, ExcerptOfAHugeOrDeepValueIsShortAndDoesNotRecurseOverIt) {
  // Built in place (no recursive copy); dump() of it would overflow the stack.
  Json deep = Json::array();
  Json* innermost = &deep;
  for (int i = 0; i < 300000; ++i) {
    innermost->push_back(Json::array());
    innermost = &innermost->back();
  }
  std::string text = json_excerpt(deep);
  EXPECT_LE(text.size(), 60u) << text;
  EXPECT_EQ(text.rfind("[[[[", 0), 0u) << text;
  Json wide = Json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  EXPECT_LE(json_excerpt(wide).size(), 60u);
  EXPECT_EQ(json_excerpt(Json(std::string(10 << 20, 'x'))).size(), 60u);
  // Small values read as before: compact dump.
  EXPECT_EQ(json_excerpt(parse_json(R"({"a": [1, 2], "b": "s"})", "x")), R"({"a":[1,2],"b":"s"})");
  EXPECT_EQ(json_excerpt(parse_ordered_json(R"({"z": 1, "a": null})", "x")), R"({"z":1,"a":null})");
}

TEST(JsonBounds, NumberBeyondADoubleIsAnErrorNamingTheField) {
  for (const char* field : {"temperature", "top_p", "max_new_tokens"}) {
    std::string body =
        std::string(R"({"input_ids": [1], "sampling_params": {")") + field + R"(": 1e400}})";
    auto msg = error_of([&] { parse_json(body, "/generate request body"); });
    EXPECT_NE(msg.find(std::string("/generate request body: field 'sampling_params.") + field +
                       "': number overflow parsing '1e400'"),
              std::string::npos)
        << msg;
  }
  auto msg = error_of([] { parse_json("-1e999", "x"); });
  EXPECT_NE(msg.find("x: a value: number overflow"), std::string::npos) << msg;
}

TEST(JsonBounds, IntegerOutsideTheFieldTypeIsAnErrorShowingTheGivenValue) {
  Json j = parse_json(R"({"big": 9223372036854775808, "port": 1099511627776, "neg": -5})", "b");
  auto msg = error_of([&] { json_get<int64_t>(j, "big", "b"); });
  EXPECT_NE(msg.find("field 'big' must be an integer in [-9223372036854775808, "
                     "9223372036854775807], got 9223372036854775808"),
            std::string::npos)
      << msg;
  msg = error_of([&] { json_get<int>(j, "port", "b"); });
  EXPECT_NE(msg.find("got 1099511627776"), std::string::npos) << msg;
  msg = error_of([&] { json_get<uint32_t>(j, "neg", "b"); });
  EXPECT_NE(msg.find("got -5"), std::string::npos) << msg;
  EXPECT_EQ(json_get<int64_t>(j, "port", "b"), int64_t{1} << 40);
  EXPECT_THROW((json_get<std::vector<int64_t>>(
                   parse_json("{\"v\": [1, 18446744073709551615]}", "b"), "v", "b")),
               Error);
}

TEST(Jsonl, DirectoryInputIsAnErrorNamingThePath) {
  auto dir = testing::scratch_dir();
  auto msg = error_of([&] { read_jsonl(dir); });
  EXPECT_NE(msg.find(dir.string() + ": is a directory; expected a JSONL file"), std::string::npos)
      << msg;
}

TEST(Jsonl, NonFiniteFloatsAreWrittenAsNull) {
  EXPECT_EQ(float_to_json(std::numeric_limits<float>::quiet_NaN()), "null");
  EXPECT_EQ(float_to_json(std::numeric_limits<float>::infinity()), "null");
  EXPECT_EQ(float_to_json(-std::numeric_limits<float>::infinity()), "null");
  EXPECT_EQ(float_to_json(-0.5f), "-0.5");
  float values[] = {-1.25f, std::nanf(""), -std::numeric_limits<float>::infinity()};
  Json parsed = parse_json(floats_to_json_array(values, 3), "out");  // valid JSON
  EXPECT_EQ(parsed, parse_json("[-1.25, null, null]", "x"));
}

TEST(Strings, ClosestMatchOfAHugeWordIsBoundedAndEchoesAreTruncated) {
  std::vector<std::string> keys = {"sampling_params", "input_ids", "text", "rid", "stream"};
  std::string huge(10 << 20, 'a');
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(closest_match(huge, keys).has_value());
  EXPECT_FALSE(closest_match(std::string(kMaxTypoWordBytes, 'x'), keys).has_value());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_EQ(closest_match("sampling_param", keys).value_or(""), "sampling_params");
  std::string shown = truncate_for_message(huge);
  EXPECT_LE(shown.size(), 100u);
  EXPECT_NE(shown.find("(10485760 bytes)"), std::string::npos) << shown;
  EXPECT_EQ(truncate_for_message("short"), "short");
  // A multi-byte character at the cut is dropped whole.
  std::string utf8 = std::string(76, 'a') + "\xC3\xA9" + std::string(10, 'b');
  EXPECT_EQ(truncate_for_message(utf8, 80), std::string(76, 'a') + "... (88 bytes)");
}

// Text from outside that reaches JSON: every byte that starts no well-formed UTF-8
// sequence becomes U+FFFD; valid text, multi-byte characters included, is unchanged.
TEST(Strings, ValidUtf8ReplacesWhatIsNotUtf8) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(valid_utf8("plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(valid_utf8(std::string("a\xFF") + "b"), "a" + fffd + "b");
  EXPECT_EQ(valid_utf8("\xC3"), fffd);                                   // cut at the end
  EXPECT_EQ(valid_utf8("\xC0\xAF"), fffd + fffd);                        // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), fffd + fffd + fffd);             // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // above U+10FFFF
  EXPECT_NO_THROW(Json(valid_utf8("\xFF\xFE\xC3{")).dump());
}

}  // namespace
}  // namespace furlong
