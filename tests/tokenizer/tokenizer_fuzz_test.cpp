// Seeded, time-bounded fuzzing. (1) tokenizer.json mutants (JSON structure edits and raw byte
// edits of a small valid file) either load or throw furlong::Error, never anything else, and a
// loaded mutant encodes and decodes without crashing. (2) Random byte strings through encode:
// invalid UTF-8 is rejected with furlong::Error (the documented choice; HF only takes valid
// str), valid UTF-8 encodes and round-trips.
#include <gtest/gtest.h>
#include <unicode/ustring.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>

#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace furlong::tokenizer {
namespace {

using furlong::testing::scratch_dir;
using furlong::testing::tokenizer_dir;
using Clock = std::chrono::steady_clock;

// Plain write (no fsync: thousands of mutants are written).
void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// The seed tokenizer.json: byte alphabet, some merges, added tokens with strip flags, NFC, a
// Split + ByteLevel(GPT-2 regex) pipeline and a TemplateProcessing post-processor.
Json seed_tokenizer() {
  Json vocab = Json::object();
  const auto& bytes = unicode::byte_to_unicode();
  for (int b = 0; b < 256; ++b) vocab[bytes[b]] = b;
  Json merges = Json::array();
  int64_t next = 256;
  for (const char* m : {"h e", "Ġ t", "Ġt he", "i n", "Ġ a", "e r", "1 2", "Ġ Ġ"}) {
    std::string s = m;
    const auto space = s.find(' ');
    const std::string merged = s.substr(0, space) + s.substr(space + 1);
    if (!vocab.contains(merged)) vocab[merged] = next++;
    merges.push_back(Json::array({s.substr(0, space), s.substr(space + 1)}));
  }
  auto added = [](int64_t id, const char* content, bool lstrip, bool special) {
    return Json{{"id", id},          {"content", content}, {"single_word", !special && !lstrip},
                {"lstrip", lstrip},  {"rstrip", lstrip},   {"normalized", !special},
                {"special", special}};
  };
  return {
      {"added_tokens",
       Json::array({added(next, "<|end|>", false, true), added(next + 1, "<l>", true, false),
                    added(next + 2, "<w>", false, false)})},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", Json::array({{{"type", "NFC"}}})}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         Json::array({{{"type", "Split"},
                       {"pattern", {{"Regex", R"(\p{N}{1,3}|\s+(?!\S)|[^\s\p{N}]+|\s+)"}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {next}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}}}};
}

// JSON pointers to every node, the huge vocab object's entries sampled rarely.
void collect_nodes(const Json& node, const Json::json_pointer& at,
                   std::vector<Json::json_pointer>& out, std::mt19937& rng) {
  out.push_back(at);
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!at.empty() && at.back() == "vocab" && rng() % 32 != 0) continue;
      collect_nodes(*it, at / it.key(), out, rng);
    }
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) {
      if (!at.empty() && at.back() == "merges" && rng() % 4 != 0) continue;
      collect_nodes(node[i], at / i, out, rng);
    }
  }
}

Json random_value(std::mt19937& rng) {
  static const std::vector<Json> values = {nullptr,
                                           true,
                                           false,
                                           0,
                                           -1,
                                           7,
                                           1 << 30,
                                           1e300,
                                           -2.5,
                                           "",
                                           "BPE",
                                           "WordPiece",
                                           "Sequence",
                                           "Split",
                                           "ByteLevel",
                                           "NFC",
                                           "Isolated",
                                           "Removed",
                                           "Contiguous",
                                           "TemplateProcessing",
                                           "(",
                                           "[",
                                           "\\p{Q}",
                                           "a b",
                                           "Ġ",
                                           "<|end|>",
                                           Json::array(),
                                           Json::object(),
                                           Json::array({"a", "b"}),
                                           Json{{"type", "NFKC"}},
                                           Json{{"Regex", "(a|b)*c"}},
                                           Json{{"String", "-"}},
                                           Json{{"content", "x"}}};
  return values[rng() % values.size()];
}

void mutate_structure(Json& j, std::mt19937& rng) {
  std::vector<Json::json_pointer> nodes;
  collect_nodes(j, Json::json_pointer(), nodes, rng);
  const auto& at = nodes[rng() % nodes.size()];
  if (at.empty()) return;
  Json& parent = j[at.parent_pointer()];
  switch (rng() % 4) {
    case 0:  // delete
      if (parent.is_object()) {
        parent.erase(at.back());
      } else if (parent.is_array()) {
        parent.erase(parent.begin() + static_cast<std::ptrdiff_t>(std::stoul(at.back())));
      }
      break;
    case 1:  // duplicate into an array
      if (parent.is_array()) parent.push_back(j[at]);
      break;
    default:
      j[at] = random_value(rng);
  }
}

void mutate_bytes(std::string& text, std::mt19937& rng) {
  if (text.empty()) return;
  const size_t pos = rng() % text.size();
  switch (rng() % 5) {
    case 0:
      text[pos] = static_cast<char>(rng());
      break;
    case 1:
      text.erase(pos, 1 + rng() % 16);
      break;
    case 2:
      text.insert(pos, 1, "{}[]\",:\\0-9e"[rng() % 12]);
      break;
    case 3:
      text.insert(pos, text.substr(rng() % text.size(), rng() % 32));
      break;
    default:
      text.resize(pos);
  }
}

std::string random_utf8_text(std::mt19937& rng) {
  static const std::vector<std::string> parts = {
      "the",          " the", "12345", "<|end|>",          "<l>", " <w> ", "\xC3\xA9", "e\xCC\x81",
      "\xE4\xB8\xAD", "  ",   "\n",    "\xF0\x9F\x98\x80", "x",   "'s"};
  std::string text;
  for (int i = rng() % 12; i > 0; --i) text += parts[rng() % parts.size()];
  return text;
}

// Exercises a loaded tokenizer; only furlong::Error may escape.
void exercise(const Tokenizer& tok, std::mt19937& rng) {
  for (int i = 0; i < 4; ++i) {
    auto ids = tok.encode(random_utf8_text(rng), i % 2 == 0);
    (void)tok.decode(ids, i % 2 == 1);
    StreamDecoder stream(tok);
    for (int64_t id : ids) (void)stream.push(id);
    (void)stream.flush();
  }
}

TEST(Fuzz, MutatedTokenizerJsonLoadsOrThrowsFurlongError) {
  const auto path = scratch_dir() / "tokenizer.json";
  const Json seed = seed_tokenizer();
  write_file_atomic(path, seed.dump());
  std::mt19937 rng(20240611);
  ASSERT_NO_THROW(exercise(Tokenizer::from_files(path, ""), rng));
  int loaded = 0, rejected = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (int iter = 0; Clock::now() < deadline; ++iter) {
    std::string text;
    if (iter % 2 == 0) {
      Json j = seed;
      for (int k = 1 + rng() % 3; k > 0; --k) mutate_structure(j, rng);
      text = j.dump();
    } else {
      text = seed.dump();
      for (int k = 1 + rng() % 4; k > 0; --k) mutate_bytes(text, rng);
    }
    write_text(path, text);
    try {
      Tokenizer tok = Tokenizer::from_files(path, "");
      ++loaded;
      exercise(tok, rng);
    } catch (const Error& e) {
      ++rejected;
      if (std::getenv("FURLONG_FUZZ_SHOW_ERRORS")) std::cout << e.what() << "\n";  // for review
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos)
          << "error does not name the file: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-furlong exception " << typeid(e).name() << ": " << e.what()
                    << "\ninput: " << text.substr(0, 2000);
    }
  }
  std::cout << "tokenizer.json mutants: " << loaded << " loaded, " << rejected << " rejected\n";
  EXPECT_GT(loaded, 10);
  EXPECT_GT(rejected, 10);
}

// ICU's opinion, an independent check of UTF-8 validity.
bool icu_says_valid(const std::string& s) {
  UErrorCode err = U_ZERO_ERROR;
  int32_t length = 0;
  u_strFromUTF8(nullptr, 0, &length, s.data(), static_cast<int32_t>(s.size()), &err);
  return err != U_INVALID_CHAR_FOUND && err != U_ILLEGAL_CHAR_FOUND;
}

std::string random_bytes(std::mt19937& rng) {
  std::string s;
  for (int n = rng() % 48; n > 0; --n) {
    switch (rng() % 24) {
      case 0:  // any byte: most strings with one are invalid
        s += static_cast<char>(rng());
        break;
      case 1:
      case 2:
      case 3:
      case 4: {  // a random code point, so valid multi-byte sequences are common
        char32_t c = rng() % 0x110000;
        if (c >= 0xD800 && c <= 0xDFFF) c = 'z';
        unicode::append_utf8(s, c);
        break;
      }
      default:
        s += static_cast<char>(' ' + rng() % 95);
    }
  }
  return s;
}

TEST(Fuzz, RandomBytesThroughEncode) {
  Tokenizer llama = Tokenizer::from_directory(tokenizer_dir("llama3"));
  Tokenizer qwen = Tokenizer::from_directory(tokenizer_dir("qwen3"));
  std::mt19937 rng(99);
  int valid = 0, invalid = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline) {
    const std::string s = random_bytes(rng);
    if (!icu_says_valid(s)) {
      ++invalid;
      try {
        llama.encode(s);
        ADD_FAILURE() << "invalid UTF-8 accepted: " << ::testing::PrintToString(s);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
      }
      continue;
    }
    ++valid;
    // No normalizer: byte-level BPE is lossless. Qwen3 gives back the NFC form.
    EXPECT_EQ(llama.decode(llama.encode(s)), s) << ::testing::PrintToString(s);
    std::string nfc = s;
    unicode::normalize(unicode::NormalForm::kNFC, nfc);
    EXPECT_EQ(qwen.decode(qwen.encode(s)), nfc) << ::testing::PrintToString(s);
  }
  std::cout << "random byte strings: " << valid << " valid, " << invalid << " invalid\n";
  EXPECT_GT(valid, 100);
  EXPECT_GT(invalid, 100);
}

}  // namespace
}  // namespace furlong::tokenizer
