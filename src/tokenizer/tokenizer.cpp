// Encode, decode and streaming decode over a loaded tokenizer (loading: tokenizer_load.cpp).
#include <cstdio>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace furlong::tokenizer {

const std::string* TokenizerData::token_bytes(int64_t id, bool skip_special_tokens) const {
  FURLONG_CHECK(id >= 0, "decode: token id ", id, " is negative");
  // An id without a token (past the vocabulary, as a model's padded embedding rows are, or a
  // hole in it) has no text: HF's decode skips it too.
  if (id >= vocab_size) return nullptr;
  const uint8_t kind = id_kind[id];
  if (kind == kNoToken) return nullptr;
  if (skip_special_tokens && kind == kSpecial) return nullptr;
  return &decoded[id];
}

void TokenizerData::encode_pre_tokenized(std::string_view text, std::vector<int64_t>& ids) const {
  if (text.empty()) return;
  if (!pre_tokenizer) {
    model->tokenize(text, ids);
    return;
  }
  pre_tokenizer->split(text, [&](std::string_view piece) { model->tokenize(piece, ids); });
}

// A segment of text between added tokens that match raw text: normalized, then split on the
// added tokens that match normalized text, then pre-tokenized and BPE-encoded.
void TokenizerData::encode_segment(std::string_view text, std::vector<int64_t>& ids) const {
  auto on_segment = [&](std::string_view segment, int64_t id) {
    if (id >= 0) {
      ids.push_back(id);
    } else {
      encode_pre_tokenized(segment, ids);
    }
  };
  if (!normalizer) {
    if (normalized_matcher.empty()) {
      encode_pre_tokenized(text, ids);
    } else {
      normalized_matcher.split(text, on_segment);
    }
    return;
  }
  std::string normalized(text);
  normalizer->normalize(normalized);
  normalized_matcher.split(normalized, on_segment);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const size_t bad = unicode::find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[bad]));
    FURLONG_FAIL("encode: input is not valid UTF-8 (byte ", byte, " at offset ", bad,
                 "); the tokenizer accepts only valid UTF-8 text");
  }
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 8);
  impl_->raw_matcher.split(text, [&](std::string_view segment, int64_t id) {
    if (id >= 0) {
      ids.push_back(id);
    } else {
      impl_->encode_segment(segment, ids);
    }
  });
  if (add_special_tokens && impl_->post_processor) impl_->post_processor->apply(ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (int64_t id : ids) {
    const std::string* token = impl_->token_bytes(id, skip_special_tokens);
    if (token == nullptr) continue;
    if (!impl_->byte_level_decoder && !first) bytes += ' ';
    bytes += *token;
    first = false;
  }
  return unicode::utf8_lossy(bytes);
}

int64_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) {
    return it->second;
  }
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
    return it->second->display;
  }
  if (const std::string* token = impl_->model->id_to_token(id)) return *token;
  return std::nullopt;
}

bool Tokenizer::is_special(int64_t id) const {
  return id >= 0 && id < impl_->vocab_size && impl_->id_kind[id] == TokenizerData::kSpecial;
}

std::optional<int64_t> Tokenizer::eos_token_id() const {
  return impl_->eos.id;
}
std::optional<int64_t> Tokenizer::bos_token_id() const {
  return impl_->bos.id;
}
std::optional<int64_t> Tokenizer::pad_token_id() const {
  return impl_->pad.id;
}
std::optional<std::string> Tokenizer::eos_token() const {
  return impl_->eos.content;
}
std::optional<std::string> Tokenizer::bos_token() const {
  return impl_->bos.content;
}
std::optional<std::string> Tokenizer::pad_token() const {
  return impl_->pad.content;
}
const nlohmann::json& Tokenizer::config() const {
  return impl_->config;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int64_t id) {
  const TokenizerData& impl = *tokenizer_->impl_;
  const std::string* token = impl.token_bytes(id, skip_special_);
  if (token == nullptr) return {};
  if (!impl.byte_level_decoder && started_) pending_ += ' ';
  pending_ += *token;
  started_ = true;
  // Hold back a trailing incomplete character; everything before it decodes as in decode().
  const size_t ready = pending_.size() - unicode::incomplete_suffix_length(pending_);
  std::string out = unicode::utf8_lossy(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = unicode::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace furlong::tokenizer
