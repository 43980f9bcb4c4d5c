// Loading a Tokenizer from tokenizer.json (+ tokenizer_config.json). Every problem with the files
// becomes a furlong::Error that names the file and the field.
#include <algorithm>
#include <filesystem>

#include "core/json_util.h"
#include "core/log.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace furlong::tokenizer {
namespace {

constexpr int64_t kMaxId = (int64_t{1} << 31) - 2;

const Json& field_or_null(const Json& obj, const char* name) {
  static const Json null_value;
  auto it = obj.find(name);
  return it == obj.end() ? null_value : *it;
}

AddedToken parse_added_token(const Json& spec, const std::string& where) {
  AddedToken token;
  token.id = json_get<int64_t>(spec, "id", where);
  FURLONG_CHECK(token.id >= 0 && token.id <= kMaxId, where, ": id ", token.id,
                " must be in [0, 2^31)");
  token.content = json_get<std::string>(spec, "content", where);
  token.single_word = json_get_or<bool>(spec, "single_word", false, where);
  token.lstrip = json_get_or<bool>(spec, "lstrip", false, where);
  token.rstrip = json_get_or<bool>(spec, "rstrip", false, where);
  token.normalized = json_get_or<bool>(spec, "normalized", true, where);
  token.special = json_get_or<bool>(spec, "special", false, where);
  return token;
}

void load_added_tokens(const Json& root, TokenizerData& impl) {
  const Json& list = field_or_null(root, "added_tokens");
  if (list.is_null()) return;
  FURLONG_CHECK(list.is_array(), impl.where, ": field 'added_tokens' must be an array");
  impl.added.reserve(list.size());  // the matchers keep pointers into this vector
  for (size_t i = 0; i < list.size(); ++i) {
    impl.added.push_back(
        parse_added_token(list[i], impl.where + ": added_tokens[" + std::to_string(i) + "]"));
  }
  for (AddedToken& token : impl.added) {
    token.display = token.content;
    if (token.normalized && impl.normalizer) impl.normalizer->normalize(token.display);
    impl.added_by_id[token.id] = &token;
    impl.added_by_content[token.content] = token.id;
    // Normalized tokens are matched in normalized text, so by their normalized form.
    if (token.normalized) {
      impl.normalized_matcher.add(token.display, &token);
    } else {
      impl.raw_matcher.add(token.content, &token);
    }
  }
}

void load_model(const Json& root, TokenizerData& impl) {
  auto model = root.find("model");
  FURLONG_CHECK(model != root.end() && model->is_object(), impl.where,
                ": missing the 'model' object (the BPE vocab and merges)");
  const auto type = json_get_optional<std::string>(*model, "type", impl.where + ": model");
  if (type) {
    FURLONG_CHECK(*type == "BPE", impl.where, ": model type '", *type,
                  "' is not supported (furlong supports BPE models only)");
  } else {
    FURLONG_CHECK(model->contains("merges"), impl.where,
                  ": model has no 'type' and no 'merges'; only BPE models are supported");
  }
  impl.model = std::make_unique<Bpe>(*model, impl.where);
}

void load_decoder(const Json& root, TokenizerData& impl) {
  const Json& spec = field_or_null(root, "decoder");
  if (spec.is_null()) return;  // HF joins tokens with spaces
  const auto type = json_get<std::string>(spec, "type", impl.where + ": decoder");
  FURLONG_CHECK(type == "ByteLevel", impl.where, ": unsupported decoder type '", type,
                "' (supported: ByteLevel, or none)");
  impl.byte_level_decoder = true;
}

// What the ByteLevel decoder makes of one token: its characters mapped back to bytes, or the
// token's own UTF-8 if any character is outside the byte-level alphabet.
std::string byte_level_bytes(const std::string& token) {
  std::string out;
  out.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    const int byte = unicode::unicode_to_byte(unicode::next_code_point(token, pos));
    if (byte < 0) return token;
    out += static_cast<char>(byte);
  }
  return out;
}

void build_id_tables(TokenizerData& impl) {
  int64_t size = impl.model->size();
  for (const AddedToken& token : impl.added) size = std::max(size, token.id + 1);
  const int64_t known = impl.model->size() + static_cast<int64_t>(impl.added.size());
  FURLONG_CHECK(size <= 2 * known + 1024, impl.where, ": added token id ", size - 1,
                " is far beyond the vocabulary size (", known, " tokens); ids must be dense");
  impl.vocab_size = size;
  impl.decoded.assign(size, std::string());
  impl.id_kind.assign(size, TokenizerData::kNoToken);
  for (int64_t id = 0; id < size; ++id) {
    const std::string* token = impl.model->id_to_token(id);
    auto added = impl.added_by_id.find(id);
    if (added != impl.added_by_id.end()) token = &added->second->display;
    if (token == nullptr) continue;
    impl.decoded[id] = impl.byte_level_decoder ? byte_level_bytes(*token) : *token;
    const bool special = added != impl.added_by_id.end() && added->second->special;
    impl.id_kind[id] = special ? TokenizerData::kSpecial : TokenizerData::kNormal;
  }
}

void check_post_processor_ids(const TokenizerData& impl) {
  if (!impl.post_processor) return;
  std::vector<int64_t> ids;
  impl.post_processor->apply(ids);
  for (int64_t id : ids) {
    FURLONG_CHECK(id >= 0 && id < impl.vocab_size && impl.id_kind[id] != TokenizerData::kNoToken,
                  impl.where, ": post_processor adds token id ", id,
                  ", which is not in the vocabulary");
  }
}

void load_tokenizer_json(const Json& root, TokenizerData& impl) {
  FURLONG_CHECK(root.is_object(), impl.where, ": expected a JSON object at the top level, got ",
                json_type_name(root));
  load_model(root, impl);
  impl.normalizer = make_normalizer(field_or_null(root, "normalizer"), impl.where + ": normalizer");
  impl.pre_tokenizer =
      make_pre_tokenizer(field_or_null(root, "pre_tokenizer"), impl.where + ": pre_tokenizer");
  impl.post_processor =
      make_post_processor(field_or_null(root, "post_processor"), impl.where + ": post_processor");
  load_added_tokens(root, impl);
  load_decoder(root, impl);
  for (const char* ignored : {"truncation", "padding"}) {
    if (!field_or_null(root, ignored).is_null()) {
      LOG_WARN(impl.where, ": '", ignored, "' is set but ignored (encode never truncates or pads)");
    }
  }
  build_id_tables(impl);
  check_post_processor_ids(impl);
}

// eos_token etc.: a string, null, or an AddedToken object {"content": ...}.
NamedToken resolve_named_token(const TokenizerData& impl, const std::string& where,
                               const char* field) {
  NamedToken named;
  const Json& value = field_or_null(impl.config, field);
  if (value.is_null()) return named;
  if (value.is_string()) {
    named.content = value.get<std::string>();
  } else {
    FURLONG_CHECK(value.is_object(), where, ": field '", field,
                  "' must be a string, null or an object with 'content', got ",
                  json_type_name(value));
    named.content = json_get<std::string>(value, "content", where + ": " + field);
  }
  if (auto it = impl.added_by_content.find(*named.content); it != impl.added_by_content.end()) {
    named.id = it->second;
  } else {
    named.id = impl.model->token_to_id(*named.content);
  }
  FURLONG_CHECK(named.id.has_value(), where, ": ", field, " '", *named.content,
                "' is not in the tokenizer's vocabulary (", impl.where, ")");
  return named;
}

void load_config(const std::filesystem::path& path, TokenizerData& impl) {
  const std::string where = path.string();
  impl.config = read_json_file(path);
  FURLONG_CHECK(impl.config.is_object(), where, ": expected a JSON object at the top level, got ",
                json_type_name(impl.config));
  impl.eos = resolve_named_token(impl, where, "eos_token");
  impl.bos = resolve_named_token(impl, where, "bos_token");
  impl.pad = resolve_named_token(impl, where, "pad_token");
}

}  // namespace

Tokenizer Tokenizer::from_files(const std::filesystem::path& tokenizer_json,
                                const std::filesystem::path& config_path) {
  auto impl = std::make_unique<Impl>();
  impl->where = tokenizer_json.string();
  const Json root = read_json_file(tokenizer_json);
  try {
    load_tokenizer_json(root, *impl);
  } catch (const nlohmann::json::exception& e) {  // a safety net: fields are checked first
    FURLONG_FAIL(impl->where, ": malformed tokenizer.json: ", e.what());
  }
  if (!config_path.empty()) {
    try {
      load_config(config_path, *impl);
    } catch (const nlohmann::json::exception& e) {
      FURLONG_FAIL(config_path.string(), ": malformed tokenizer config: ", e.what());
    }
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_directory(const std::filesystem::path& dir) {
  const auto json_path = dir / "tokenizer.json";
  FURLONG_CHECK(std::filesystem::is_regular_file(json_path), dir.string(),
                ": no tokenizer.json in this directory (furlong reads HF fast-tokenizer files)");
  const auto config_path = dir / "tokenizer_config.json";
  return from_files(json_path,
                    std::filesystem::exists(config_path) ? config_path : std::filesystem::path());
}

}  // namespace furlong::tokenizer
