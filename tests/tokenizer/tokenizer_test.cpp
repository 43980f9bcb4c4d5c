// Unit tests for src/tokenizer (BPE part): UTF-8 handling, the byte-level alphabet, regex
// translation, a small hand-checked tokenizer, tokenizer_config.json special tokens, errors for
// malformed files and inputs (each naming the file and the problem), thread safety, and an
// encode-throughput report (printed, never asserted).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <random>
#include <set>
#include <thread>

#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace furlong::tokenizer {
namespace {

using furlong::testing::scratch_dir;
using furlong::testing::tokenizer_dir;
using Ids = std::vector<int64_t>;

constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using testing::error_of;

// A small valid byte-level BPE tokenizer.json: the 256 byte characters, a few merges, two added
// tokens, NFC, the Qwen split regex, a TemplateProcessing post-processor.
Json small_tokenizer_json() {
  Json vocab = Json::object();
  const auto& bytes = unicode::byte_to_unicode();
  for (int b = 0; b < 256; ++b) vocab[bytes[b]] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"Ġ", "t"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"e", "r"}, {"1", "2"}};
  Json merge_list = Json::array();
  int64_t next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back(a + " " + b);
  }
  auto added = [](int64_t id, const char* content, bool special) {
    return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  Json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", false},
                     {"use_regex", false}};
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", kQwenPattern}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json post = {{"type", "TemplateProcessing"},
               {"single", Json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                       {{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}}})},
               {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {next}}}}}}};
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", Json::array({added(next, "<|end|>", true), added(next + 1, "<x>", false)})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level})}}},
      {"post_processor", post},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"ignore_merges", false}}}};
}

std::filesystem::path write(const std::filesystem::path& path, const std::string& text) {
  write_file_atomic(path, text);
  return path;
}

// Loads the small tokenizer with `mutate` applied to its JSON; returns the error text if any.
std::string load_error(const std::function<void(Json&)>& mutate, std::string* path_out = nullptr) {
  Json j = small_tokenizer_json();
  mutate(j);
  auto path = write(scratch_dir() / "tokenizer.json", j.dump());
  if (path_out) *path_out = path.string();
  return error_of([&] { Tokenizer::from_files(path, ""); });
}

Tokenizer small_tokenizer() {
  auto path = write(scratch_dir() / "tokenizer.json", small_tokenizer_json().dump());
  return Tokenizer::from_files(path, "");
}

const Tokenizer& qwen3() {
  static const Tokenizer tok = Tokenizer::from_directory(tokenizer_dir("qwen3"));
  return tok;
}

TEST(Utf8, LossyReplacesEachMaximalInvalidSubpart) {
  using unicode::utf8_lossy;
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("abc \xE4\xB8\xAD"), "abc \xE4\xB8\xAD");
  EXPECT_EQ(utf8_lossy("\x80"), r);
  EXPECT_EQ(utf8_lossy("\xE4\xB8"), r);              // truncated: one replacement
  EXPECT_EQ(utf8_lossy("\xE4\xB8x"), r + "x");       // cut short by a non-continuation
  EXPECT_EQ(utf8_lossy("\xE0\x80"), r + r);          // E0 needs A0..BF next
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);  // surrogates are invalid
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);          // overlong
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), r);
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8, IncompleteSuffixIsHeldOnlyWhenItCanStillComplete) {
  using unicode::incomplete_suffix_length;
  EXPECT_EQ(incomplete_suffix_length(""), 0u);
  EXPECT_EQ(incomplete_suffix_length("ab"), 0u);
  EXPECT_EQ(incomplete_suffix_length("a\xE4"), 1u);
  EXPECT_EQ(incomplete_suffix_length("a\xE4\xB8"), 2u);
  EXPECT_EQ(incomplete_suffix_length("a\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(incomplete_suffix_length("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_suffix_length("\xE0\x80"), 0u);  // can never complete
  EXPECT_EQ(incomplete_suffix_length("\x80\x80"), 0u);
}

TEST(Utf8, FindInvalid) {
  EXPECT_EQ(unicode::find_invalid_utf8("h\xC3\xA9llo"), std::string_view::npos);
  EXPECT_EQ(unicode::find_invalid_utf8("ab\xFF"), 2u);
  EXPECT_EQ(unicode::find_invalid_utf8("ab\xC3"), 2u);
}

TEST(ByteLevel, AlphabetIsABijectionOfPrintableCharacters) {
  const auto& table = unicode::byte_to_unicode();
  EXPECT_EQ(table[' '], "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(table['\n'], "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(table['a'], "a");
  std::set<std::string> seen(table.begin(), table.end());
  EXPECT_EQ(seen.size(), 256u);
  for (int b = 0; b < 256; ++b) {
    size_t pos = 0;
    EXPECT_EQ(unicode::unicode_to_byte(unicode::next_code_point(table[b], pos)), b);
  }
  EXPECT_EQ(unicode::unicode_to_byte(U'中'), -1);
}

TEST(Regex, TranslatesOnigurumaClasses) {
  EXPECT_EQ(Regex::translate(R"(\s+(?!\S))"), R"([\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}]))");
  EXPECT_EQ(Regex::translate(R"([^\s\p{L}])"), R"([^\t-\r\x{85}\p{Z}\p{L}])");
  EXPECT_EQ(Regex::translate(R"(\h\d)"), R"([0-9a-fA-F]\d)");
  EXPECT_EQ(Regex::translate(R"([\]\s])"), R"([\]\t-\r\x{85}\p{Z}])");
  EXPECT_EQ(Regex::translate(R"((?m:.+)(?i-m)(?:x)(?=m))"), R"((?s:.+)(?i-s)(?:x)(?=m))");
}

TEST(Regex, MongolianVowelSeparatorIsNotWhitespace) {
  Regex re(R"(\s+)", "test");
  size_t start = 0, end = 0;
  EXPECT_FALSE(re.find("\xE1\xA0\x8E", 0, start, end));  // U+180E (Cf since Unicode 6.3)
  EXPECT_TRUE(re.find("x\xC2\x85y", 0, start, end));     // NEL
  EXPECT_EQ(start, 1u);
  EXPECT_EQ(end, 3u);
}

TEST(Normalize, NfcComposesButLeavesCharactersNewerThanUnicode9) {
  std::string s = "e\xCC\x81";  // e + U+0301
  unicode::normalize(unicode::NormalForm::kNFC, s);
  EXPECT_EQ(s, "\xC3\xA9");
  // U+A8E3 (ccc 230) then U+1193E (Unicode 13, ccc 9): HF's tables do not reorder them.
  std::string newer = "\xEA\xA3\xA3\xF0\x91\xA4\xBE";
  std::string copy = newer;
  unicode::normalize(unicode::NormalForm::kNFC, copy);
  EXPECT_EQ(copy, newer);
}

TEST(SmallTokenizer, MergesByRankAndAppliesTheTemplate) {
  Tokenizer tok = small_tokenizer();
  const int64_t t = *tok.token_to_id("t"), he = *tok.token_to_id("he");
  const int64_t the = *tok.token_to_id("Ġthe");
  EXPECT_EQ(tok.encode(" the"), (Ids{the}));  // h+e (rank 0), Ġ+t (1), Ġt+he (2)
  EXPECT_EQ(tok.encode("the"), (Ids{t, he}));
  const int64_t end = *tok.token_to_id("<|end|>");
  EXPECT_EQ(tok.encode(" the", true), (Ids{the, end}));
  EXPECT_EQ(tok.encode(" the<|end|>"), (Ids{the, end}));
  EXPECT_TRUE(tok.is_special(end));
  EXPECT_FALSE(tok.is_special(*tok.token_to_id("<x>")));
  EXPECT_EQ(tok.decode({the, end}), " the<|end|>");
  EXPECT_EQ(tok.decode({the, end}, true), " the");
  EXPECT_EQ(tok.vocab_size(), end + 2);
  EXPECT_EQ(tok.id_to_token(end), "<|end|>");
  EXPECT_EQ(tok.id_to_token(tok.vocab_size()), std::nullopt);
}

TEST(RealTokenizers, SpecialTokensAreNeverSplit) {
  const Tokenizer& tok = qwen3();
  const int64_t start = *tok.token_to_id("<|im_start|>"), end = *tok.token_to_id("<|im_end|>");
  EXPECT_EQ(start, 151644);
  EXPECT_EQ(end, 151645);
  Ids ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(ids.back(), end);
  EXPECT_TRUE(tok.is_special(start));
  EXPECT_FALSE(tok.is_special(*tok.token_to_id("<think>")));
  EXPECT_EQ(tok.id_to_token(151667), "<think>");
  EXPECT_EQ(tok.token_to_id("hello"), 14990);
  EXPECT_EQ(tok.vocab_size(), 151669);
}

TEST(RealTokenizers, ConfigSpecialTokens) {
  const Tokenizer& qwen = qwen3();
  EXPECT_EQ(qwen.eos_token(), "<|im_end|>");
  EXPECT_EQ(qwen.eos_token_id(), 151645);
  EXPECT_EQ(qwen.pad_token_id(), 151643);
  EXPECT_EQ(qwen.bos_token_id(), std::nullopt);
  EXPECT_EQ(qwen.config()["tokenizer_class"], "Qwen2Tokenizer");
  Tokenizer llama = Tokenizer::from_directory(tokenizer_dir("llama3"));
  EXPECT_EQ(llama.bos_token_id(), 128000);
  EXPECT_EQ(llama.eos_token_id(), 128001);
  EXPECT_EQ(llama.pad_token(), std::nullopt);
  // This Llama 3 file's post-processor is ByteLevel: like HF, no BOS is added.
  EXPECT_EQ(llama.encode("hello world", true), llama.encode("hello world", false));
}

TEST(Config, TokensMayBeStringsNullOrAddedTokenObjects) {
  auto dir = scratch_dir();
  auto json = write(dir / "tokenizer.json", small_tokenizer_json().dump());
  auto config = write(dir / "tokenizer_config.json", R"({
    "eos_token": {"__type": "AddedToken", "content": "<|end|>", "lstrip": false},
    "bos_token": null, "pad_token": "<x>"})");
  Tokenizer tok = Tokenizer::from_files(json, config);
  EXPECT_EQ(tok.eos_token(), "<|end|>");
  EXPECT_EQ(tok.eos_token_id(), tok.token_to_id("<|end|>"));
  EXPECT_EQ(tok.bos_token(), std::nullopt);
  EXPECT_EQ(tok.bos_token_id(), std::nullopt);
  EXPECT_EQ(tok.pad_token_id(), tok.token_to_id("<x>"));
  Tokenizer from_dir = Tokenizer::from_directory(dir);
  EXPECT_EQ(from_dir.pad_token(), "<x>");
  Tokenizer no_config = Tokenizer::from_files(json, "");
  EXPECT_TRUE(no_config.config().is_object() && no_config.config().empty());
  EXPECT_EQ(no_config.eos_token_id(), std::nullopt);
}

TEST(Config, ErrorsNameTheFileAndTheToken) {
  auto dir = scratch_dir();
  auto json = write(dir / "tokenizer.json", small_tokenizer_json().dump());
  auto check = [&](const std::string& text, const std::string& expected) {
    auto config = write(dir / "tokenizer_config.json", text);
    auto msg = error_of([&] { Tokenizer::from_files(json, config); });
    EXPECT_NE(msg.find(config.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  };
  check(R"({"eos_token": "<|nope|>"})",
        "eos_token '<|nope|>' is not in the tokenizer's vocabulary");
  check(R"({"bos_token": 7})", "field 'bos_token' must be a string, null or an object");
  check(R"({"pad_token": {"lstrip": true}})", "required field 'content' is missing");
  check(R"({"eos_token": )", "invalid JSON");
  check(R"([1, 2])", "expected a JSON object");
}

TEST(BadInput, MalformedTokenizerJsonNamesFileAndProblem) {
  std::string path;
  auto expect = [&](const std::function<void(Json&)>& mutate, const std::string& expected) {
    auto msg = load_error(mutate, &path);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  };
  expect([](Json& j) { j = Json::array(); }, "expected a JSON object at the top level");
  expect([](Json& j) { j.erase("model"); }, "missing the 'model' object");
  expect([](Json& j) { j["model"]["type"] = "WordPiece"; },
         "model type 'WordPiece' is not supported");
  expect([](Json& j) { j["model"]["type"] = "Unigram"; }, "model type 'Unigram' is not supported");
  expect([](Json& j) { j["model"]["vocab"] = Json::array(); }, "field 'vocab' must be an object");
  expect([](Json& j) { j["model"]["vocab"]["a"] = "x"; }, "token 'a' has id \"x\"");
  expect([](Json& j) { j["model"]["merges"][1] = "zz q"; },
         "merges[1]: merge refers to token 'zz', which is not in the vocab");
  expect(
      [](Json& j) {
        j["model"]["merges"].push_back(Json::array({"a", "q"}));
      },
      "merge refers to the merged token 'aq'");
  expect([](Json& j) { j["model"]["merges"][0] = "a b c"; }, "two tokens separated by one space");
  expect([](Json& j) { j["model"]["dropout"] = 0.1; }, "dropout");
  expect(
      [](Json& j) {
        j["pre_tokenizer"] = {{"type", "Metaspace"}};
      },
      "pre_tokenizer: unsupported pre-tokenizer type 'Metaspace'");
  expect([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
         "pre_tokenizer.pretokenizers[0].pattern: invalid regex '(a'");
  expect([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
         "unsupported Split behavior 'Sideways'");
  expect(
      [](Json& j) {
        j["normalizer"] = {{"type", "Lowercase"}};
      },
      "normalizer: unsupported normalizer type 'Lowercase'");
  expect(
      [](Json& j) {
        j["normalizer"] = {{"type", "Sequence"}};
      },
      "field 'normalizers' must be an array");
  expect(
      [](Json& j) {
        j["decoder"] = {{"type", "WordPiece"}};
      },
      "unsupported decoder type 'WordPiece'");
  expect([](Json& j) { j["post_processor"]["type"] = "Mystery"; },
         "unsupported post_processor type 'Mystery'");
  expect([](Json& j) { j["post_processor"]["special_tokens"] = Json::object(); },
         "template uses special token '<|end|>'");
  expect([](Json& j) { j["added_tokens"][0]["id"] = "7"; },
         "added_tokens[0]: field 'id' must be an integer");
  expect([](Json& j) { j["added_tokens"][0]["id"] = 1 << 30; }, "ids must be dense");
  expect([](Json& j) { j["model"].erase("type"), j["model"].erase("merges"); },
         "only BPE models are supported");
}

TEST(BadInput, UnreadableFilesAreNamed) {
  auto dir = scratch_dir();
  auto not_json = write(dir / "tokenizer.json", "{ this is not json");
  auto msg = error_of([&] { Tokenizer::from_files(not_json, ""); });
  EXPECT_NE(msg.find(not_json.string() + ": invalid JSON"), std::string::npos) << msg;
  msg = error_of([&] { Tokenizer::from_files(dir / "missing.json", ""); });
  EXPECT_NE(msg.find("missing.json"), std::string::npos) << msg;
  msg = error_of([&] { Tokenizer::from_directory(dir / "nowhere"); });
  EXPECT_NE(msg.find("no tokenizer.json"), std::string::npos) << msg;
}

TEST(BadInput, InvalidUtf8IsRejectedWithItsOffset) {
  Tokenizer tok = small_tokenizer();
  for (const std::string& bad : {std::string("ab\xFF"), std::string("ab\xC3"),
                                 std::string("ab\xED\xA0\x80"), std::string("ab\xC0\xAF")}) {
    auto msg = error_of([&] { tok.encode(bad); });
    EXPECT_NE(msg.find("not valid UTF-8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset 2"), std::string::npos) << msg;
  }
  EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(BadInput, DecodeSkipsIdsWithoutTokensAndRejectsNegativeIds) {
  Tokenizer tok = small_tokenizer();
  // HF's decode skips ids that name no token (a model's padded vocabulary rows sample them).
  EXPECT_EQ(tok.decode({1, tok.vocab_size(), 1}), tok.decode({1, 1}));
  auto msg = error_of([&] { tok.decode({-3}); });
  EXPECT_NE(msg.find("token id -3 is negative"), std::string::npos) << msg;
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(1 << 20), "");
  msg = error_of([&] { stream.push(-1); });
  EXPECT_NE(msg.find("negative"), std::string::npos) << msg;
}

TEST(StreamDecoder, HoldsBytesUntilTheCharacterCompletes) {
  Tokenizer tok = small_tokenizer();
  const auto& bytes = unicode::byte_to_unicode();
  auto byte_id = [&](unsigned char b) { return *tok.token_to_id(bytes[b]); };
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(byte_id('a')), "a");
  EXPECT_EQ(stream.push(byte_id(0xE4)), "");
  EXPECT_EQ(stream.push(byte_id(0xB8)), "");
  EXPECT_EQ(stream.push(byte_id(0xAD)), "\xE4\xB8\xAD");
  EXPECT_EQ(stream.push(byte_id(0xF0)), "");
  EXPECT_EQ(stream.push(byte_id('b')),
            "\xEF\xBF\xBD"
            "b");  // broken: replaced, as decode does
  EXPECT_EQ(stream.push(byte_id(0xE4)), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.flush(), "");
}

TEST(LongInputs, HugePiecesAndWhitespaceRunsStayFast) {
  const Tokenizer& tok = qwen3();
  for (const std::string& text :
       {std::string(300000, 'a'), std::string(300000, ' ') + "x", std::string(200000, '\n'),
        std::string(100000, '7'), std::string(50000, '\t') + "1"}) {
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "round trip of " << text.size() << " bytes: " << seconds << " s\n";
  }
}

// Many threads share one tokenizer (and its BPE cache) and get the serial results.
TEST(Threads, ConcurrentEncodeMatchesSerial) {
  Tokenizer tok = Tokenizer::from_directory(tokenizer_dir("llama3"));
  std::mt19937 rng(7);
  std::vector<std::string> texts;
  const std::vector<std::string> words = {"alpha", " beta", "γάμμα",  " 中文",  "😀",          "\n",
                                          "  ",    "'s",    "123456", " naïve", "<|eot_id|>", "x"};
  for (int i = 0; i < 300; ++i) {
    std::string t;
    for (int k = 0; k < 40; ++k) t += words[rng() % words.size()] + std::to_string(rng() % 50);
    texts.push_back(t);
  }
  Tokenizer reference = Tokenizer::from_directory(tokenizer_dir("llama3"));
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(reference.encode(t));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (size_t i = 0; i < texts.size(); ++i) {
        size_t k = (i * 7 + th * 13) % texts.size();
        if (tok.encode(texts[k]) != expected[k]) ++mismatches;
        if (tok.decode(expected[k]) != texts[k]) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Pseudo-English with many distinct words (a cold BPE cache), about `bytes` long.
std::string pseudo_english(size_t bytes, unsigned seed) {
  const std::vector<std::string> syllables = {"ta",  "re",  "mon", "ci", "ous", "ly",  "pro", "ex",
                                              "ing", "ter", "al",  "de", "vi",  "con", "st",  "an"};
  std::mt19937 rng(seed);
  std::string text;
  while (text.size() < bytes) {
    const int n = 1 + rng() % 4;
    for (int i = 0; i < n; ++i) text += syllables[rng() % syllables.size()];
    const unsigned r = rng() % 20;
    text += r == 0 ? ". " : r == 1 ? ", " : r == 2 ? "\n\n" : r == 3 ? " 1984 " : " ";
  }
  return text;
}

// Reports throughput (not asserted: performance is measured in bench/, side by side).
TEST(Performance, EncodeOneMegabyteReport) {
  const std::string text = pseudo_english(1 << 20, 1);
  for (const char* name : {"qwen3", "llama3"}) {
    auto t0 = std::chrono::steady_clock::now();
    Tokenizer tok = Tokenizer::from_directory(tokenizer_dir(name));
    auto t1 = std::chrono::steady_clock::now();
    Ids ids = tok.encode(text);
    auto t2 = std::chrono::steady_clock::now();
    Ids again = tok.encode(text);
    auto t3 = std::chrono::steady_clock::now();
    std::string decoded = tok.decode(ids);
    auto t4 = std::chrono::steady_clock::now();
    EXPECT_EQ(ids, again);
    EXPECT_EQ(decoded, text);
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::cout << name << ": load " << secs(t0, t1) << " s; encode 1 MiB (" << ids.size()
              << " tokens) cold cache " << secs(t1, t2) << " s, warm " << secs(t2, t3)
              << " s; decode " << secs(t3, t4) << " s\n";
  }
}

}  // namespace
}  // namespace furlong::tokenizer
