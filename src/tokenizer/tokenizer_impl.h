// Internal: the state behind furlong::tokenizer::Tokenizer (TokenizerData, the body of its
// private Impl), shared by the loader
// (tokenizer_load.cpp) and the encode/decode paths (tokenizer.cpp). Immutable after loading
// except for the BPE cache, which is internally synchronized, so one Tokenizer serves many
// threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace furlong::tokenizer {

// A token named in tokenizer_config.json (eos_token, ...), resolved to its id.
struct NamedToken {
  std::optional<std::string> content;
  std::optional<int64_t> id;
};

struct TokenizerData {
  std::string where;  // tokenizer.json path, for messages

  // Added tokens (stable storage: the matchers point into it).
  std::vector<AddedToken> added;
  std::unordered_map<int64_t, const AddedToken*> added_by_id;
  StringMap<int64_t> added_by_content;
  AddedTokenMatcher raw_matcher;         // tokens with normalized = false
  AddedTokenMatcher normalized_matcher;  // tokens with normalized = true

  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Bpe> model;
  std::unique_ptr<PostProcessor> post_processor;

  // Decoder: ByteLevel maps token characters back to bytes; without a decoder HF joins the
  // tokens with spaces.
  bool byte_level_decoder = false;
  std::vector<std::string> decoded;  // by id: the decoder's bytes for the token
  std::vector<uint8_t> id_kind;      // by id: kNoToken, kNormal or kSpecial
  static constexpr uint8_t kNoToken = 0, kNormal = 1, kSpecial = 2;
  int64_t vocab_size = 0;

  nlohmann::json config = nlohmann::json::object();
  NamedToken eos, bos, pad;

  // The decoder bytes of `id` (checked), or nullptr if it is special and skipped.
  const std::string* token_bytes(int64_t id, bool skip_special_tokens) const;
  void encode_segment(std::string_view text, std::vector<int64_t>& ids) const;
  void encode_pre_tokenized(std::string_view text, std::vector<int64_t>& ids) const;
};

struct Tokenizer::Impl : TokenizerData {};

}  // namespace furlong::tokenizer
