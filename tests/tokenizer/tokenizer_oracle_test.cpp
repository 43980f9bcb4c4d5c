// Exactness against HF `tokenizers`: scripts/oracles/tokenizer_cases.py encodes a corpus (English,
// code, CJK, emoji with ZWJ and skin tones, Arabic, Devanagari, decomposed combining marks,
// whitespace runs, digits, mixed-case contractions, embedded special tokens, seeded random
// Unicode) with the real Qwen3 and Llama 3 tokenizers and with synthetic tokenizer.json files,
// and decodes random id sequences. Every id and every decoded string must match exactly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace furlong::tokenizer {
namespace {

using furlong::testing::run_python;
using furlong::testing::scratch_dir;
using furlong::testing::source_dir;
using Ids = std::vector<int64_t>;

// A key for the oracle's inputs: the script, the tokenizer files and the corpus size.
std::string oracle_key(const std::string& random_count) {
  std::string material = read_file(source_dir() / "scripts/oracles/tokenizer_cases.py");
  for (const char* name : {"qwen3", "llama3"}) {
    const auto path = source_dir() / ".cache" / "tokenizers" / name / "tokenizer.json";
    material += std::to_string(std::filesystem::file_size(path)) +
                std::to_string(std::filesystem::last_write_time(path).time_since_epoch().count());
  }
  material += random_count;
  return std::to_string(std::hash<std::string>{}(material));
}

// The oracle's output directory. Computed once and shared by the test processes of one build
// tree (written to a scratch directory, then renamed into place, so concurrent runs are safe).
// FURLONG_TOKENIZER_RANDOM_CASES sets how many seeded random strings join the corpus (default
// 250; raise it for a longer soak).
std::filesystem::path oracle_dir() {
  const char* env = std::getenv("FURLONG_TOKENIZER_RANDOM_CASES");
  const std::string random_count = env ? env : "250";
  const auto cached = furlong::testing::binary_dir() / "testdata" /
                      ("tokenizer_oracle." + oracle_key(random_count));
  if (std::filesystem::exists(cached / "cases.json")) return cached;
  const auto dir = scratch_dir();
  run_python("oracles/tokenizer_cases.py",
             {"--tokenizers", (source_dir() / ".cache" / "tokenizers").string(), "--out-dir",
              dir.string(), "--random-count", random_count});
  std::error_code ec;
  std::filesystem::rename(dir, cached, ec);  // fails harmlessly if another process won
  return std::filesystem::exists(cached / "cases.json") ? cached : dir;
}

const std::filesystem::path& oracle_path() {
  static const std::filesystem::path dir = oracle_dir();
  return dir;
}

const Json& oracle() {
  static const Json cases = read_json_file(oracle_path() / "cases.json");
  return cases;
}

const Json& oracle_for(const std::string& name) {
  for (const auto& t : oracle()["tokenizers"]) {
    if (t["name"] == name) return t;
  }
  ADD_FAILURE() << "oracle has no tokenizer " << name;
  static const Json empty = Json::object();
  return empty;
}

Tokenizer load(const Json& entry) {
  std::filesystem::path path = entry["path"].get<std::string>();
  return Tokenizer::from_files(path.is_absolute() ? path : oracle_path() / path, "");
}

// A printable rendering of a test text for failure messages.
std::string show(const std::string& text) {
  return Json(text).dump(-1, ' ', true);
}

// Where two id sequences first differ, with the ids around it.
std::string first_difference(const Ids& actual, const Ids& expected) {
  size_t i = 0;
  while (i < actual.size() && i < expected.size() && actual[i] == expected[i]) ++i;
  if (i == actual.size() && i == expected.size()) return "equal";
  auto window = [&](const Ids& ids) {
    Ids part(ids.begin() + std::min(i, ids.size()), ids.begin() + std::min(i + 8, ids.size()));
    return Json(part).dump();
  };
  return "first difference at index " + std::to_string(i) + ": got " + window(actual) +
         ", HF gives " + window(expected);
}

class OracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleTest, EncodeMatchesHf) {
  const Json& entry = oracle_for(GetParam());
  Tokenizer tok = load(entry);
  EXPECT_EQ(tok.vocab_size(), entry["vocab_size"].get<int64_t>());
  int failures = 0;
  for (const auto& c : entry["cases"]) {
    const auto text = c["text"].get<std::string>();
    const auto ids = tok.encode(text, false), expected = c["ids"].get<Ids>();
    EXPECT_EQ(ids, expected) << show(text) << "\n" << first_difference(ids, expected);
    const auto with_special = tok.encode(text, true);
    const auto expected_special = c["ids_special"].get<Ids>();
    EXPECT_EQ(with_special, expected_special) << show(text) << "\n"
                                              << first_difference(with_special, expected_special);
    if (ids != expected) ++failures;
    if (failures > 10) break;
  }
}

TEST_P(OracleTest, DecodeOfEncodingMatchesHf) {
  const Json& entry = oracle_for(GetParam());
  Tokenizer tok = load(entry);
  for (const auto& c : entry["cases"]) {
    const auto ids = c["ids"].get<Ids>();
    EXPECT_EQ(tok.decode(ids, false), c["decoded"].get<std::string>()) << show(c["text"]);
    EXPECT_EQ(tok.decode(ids, true), c["decoded_skip"].get<std::string>()) << show(c["text"]);
  }
}

TEST_P(OracleTest, DecodeOfRandomIdsMatchesHf) {
  const Json& entry = oracle_for(GetParam());
  Tokenizer tok = load(entry);
  size_t with_replacement = 0;
  for (const auto& d : entry["decodes"]) {
    const auto ids = d["ids"].get<Ids>();
    const auto text = d["text"].get<std::string>();
    EXPECT_EQ(tok.decode(ids, false), text) << Json(ids).dump();
    EXPECT_EQ(tok.decode(ids, true), d["text_skip"].get<std::string>()) << Json(ids).dump();
    if (text.find("\xEF\xBF\xBD") != std::string::npos) ++with_replacement;
  }
  // The corpus must actually exercise split characters (byte-level decoders only).
  if (GetParam() != "synthetic_splits" && GetParam() != "synthetic_unk") {
    EXPECT_GT(with_replacement, 10u);
  }
}

// decode(encode(x)) == x for the real tokenizers on text that normalization leaves unchanged.
TEST_P(OracleTest, RoundTripsNormalizedText) {
  const Json& entry = oracle_for(GetParam());
  if (GetParam().rfind("synthetic", 0) == 0) GTEST_SKIP() << "lossy pre-tokenizers by design";
  Tokenizer tok = load(entry);
  for (const auto& c : entry["cases"]) {
    auto text = c["text"].get<std::string>();
    std::string nfc = text;
    unicode::normalize(unicode::NormalForm::kNFC, nfc);
    if (GetParam() == "qwen3" && nfc != text) continue;
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << show(text);
  }
}

// Pushing ids one at a time yields only whole characters, and all pushes plus flush equal
// decode() of the whole sequence.
TEST_P(OracleTest, StreamDecoderMatchesDecode) {
  const Json& entry = oracle_for(GetParam());
  Tokenizer tok = load(entry);
  auto check = [&](const Ids& ids, bool skip) {
    StreamDecoder stream(tok, skip);
    std::string all;
    for (int64_t id : ids) {
      std::string piece = stream.push(id);
      EXPECT_EQ(unicode::find_invalid_utf8(piece), std::string::npos);
      all += piece;
    }
    all += stream.flush();
    EXPECT_EQ(all, tok.decode(ids, skip)) << Json(ids).dump();
  };
  for (const auto& c : entry["cases"]) check(c["ids"].get<Ids>(), false);
  for (const auto& d : entry["decodes"]) {
    check(d["ids"].get<Ids>(), false);
    check(d["ids"].get<Ids>(), true);
  }
}

// HF's Split pre-tokenizer (Oniguruma) and ours (PCRE2 after translation) cut probe texts
// into the same pieces.
TEST(OracleRegex, SplitPiecesMatchOniguruma) {
  for (const auto& probe : oracle()["regex_probes"]) {
    const auto pattern = probe["pattern"].get<std::string>();
    Json spec = {{"type", "Split"},
                 {"pattern", {{"Regex", pattern}}},
                 {"behavior", "Isolated"},
                 {"invert", false}};
    auto split = make_pre_tokenizer(spec, "probe");
    std::vector<std::string> pieces;
    split->split(probe["text"].get<std::string>(),
                 [&](std::string_view piece) { pieces.emplace_back(piece); });
    EXPECT_EQ(pieces, probe["pieces"].get<std::vector<std::string>>())
        << pattern << " on " << show(probe["text"]);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, OracleTest,
                         ::testing::Values("qwen3", "llama3", "synthetic_gpt2", "synthetic_splits",
                                           "synthetic_removed", "synthetic_unk"));

}  // namespace
}  // namespace furlong::tokenizer
