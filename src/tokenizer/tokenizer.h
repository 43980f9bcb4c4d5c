// A HuggingFace tokenizer loaded from tokenizer.json (+ tokenizer_config.json): byte-level BPE
// with the Split pre-tokenizer regexes (Unicode classes), the NFC normalizer, added/special
// tokens matched before BPE, and the ByteLevel decoder. Exact (same ids) as HF `tokenizers`
// on Qwen2/Qwen3 and Llama 3 files. Thread-safe: one Tokenizer may encode/decode from many
// threads at once (its BPE cache is internally synchronized).
//
// Deliberate differences from HF: encode rejects invalid UTF-8 with furlong::Error (HF's Python
// API only accepts valid str), and decode rejects ids that name no token (HF drops them).
// Load errors (malformed JSON, unsupported model/normalizer/pre-tokenizer/decoder types, merges
// naming unknown tokens, bad regexes) are furlong::Error messages naming the file and field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace furlong::tokenizer {

class Tokenizer {
 public:
  // Reads <dir>/tokenizer.json and, if present, <dir>/tokenizer_config.json.
  static Tokenizer from_directory(const std::filesystem::path& dir);
  // `config_path` may be empty (no tokenizer_config.json).
  static Tokenizer from_files(const std::filesystem::path& tokenizer_json,
                              const std::filesystem::path& config_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // add_special_tokens applies the post-processor as HF `encode(..., add_special_tokens=True)`
  // does (e.g. a BOS token where the tokenizer's template adds one). `text` must be valid UTF-8
  // (else furlong::Error naming the offset of the first bad byte).
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Concatenated bytes of the tokens; invalid UTF-8 (a character split across a boundary that
  // is not completed) is replaced by U+FFFD exactly as HF decode does. Ids that name no token
  // (e.g. past the vocabulary: a model's padded embedding rows) decode to nothing, as in HF; a
  // negative id is a furlong::Error.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  // Number of ids (max id + 1 over the vocab and added tokens).
  int64_t vocab_size() const;
  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  bool is_special(int64_t id) const;

  // From tokenizer_config.json (None where it is null or absent). The value may be a string or
  // an AddedToken object {"content": ...}; a token missing from the vocabulary is a load error.
  std::optional<int64_t> eos_token_id() const;
  std::optional<int64_t> bos_token_id() const;
  std::optional<int64_t> pad_token_id() const;
  std::optional<std::string> eos_token() const;
  std::optional<std::string> bos_token() const;
  std::optional<std::string> pad_token() const;
  // The parsed tokenizer_config.json ({} if absent).
  const nlohmann::json& config() const;

 private:
  friend class StreamDecoder;
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for streaming generation: feed ids one by one, get back the text that is
// complete so far (bytes of an unfinished UTF-8 character are held until it completes).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int64_t id);
  // Whatever is still held (an incomplete character becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;   // decoded bytes not yet returned (an incomplete UTF-8 character)
  bool started_ = false;  // whether a token was emitted (decoders that join tokens with " ")
};

}  // namespace furlong::tokenizer
