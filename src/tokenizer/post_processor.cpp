#include "tokenizer/post_processor.h"

#include "core/json_util.h"

namespace furlong::tokenizer {
namespace {

using Ids = std::vector<int64_t>;

// The ids of one TemplateProcessing special token, looked up in its "special_tokens" map.
Ids template_token_ids(const Json& special_tokens, const std::string& name,
                       const std::string& where) {
  FURLONG_CHECK(special_tokens.is_object(), where, ": field 'special_tokens' must be an object");
  auto it = special_tokens.find(name);
  FURLONG_CHECK(it != special_tokens.end(), where, ": template uses special token '", name,
                "', which is missing from 'special_tokens'");
  const std::string token_where = where + ".special_tokens[\"" + name + "\"]";
  Ids ids = json_get<Ids>(*it, "ids", token_where);
  for (int64_t id : ids) FURLONG_CHECK(id >= 0, token_where, ": negative token id ", id);
  return ids;
}

std::unique_ptr<PostProcessor> make_template(const Json& spec, const std::string& where) {
  auto single = spec.find("single");
  FURLONG_CHECK(single != spec.end() && single->is_array(), where,
                ": field 'single' must be an array");
  const Json special_tokens = spec.contains("special_tokens") ? spec["special_tokens"] : Json();
  Ids prefix, suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    const std::string piece_where = where + ".single[" + std::to_string(i) + "]";
    if (piece.is_object() && piece.contains("Sequence")) {
      const auto id = json_get<std::string>(piece["Sequence"], "id", piece_where);
      FURLONG_CHECK(id == "A" && !seen_sequence, piece_where,
                    ": a single-sequence template must use sequence A exactly once");
      seen_sequence = true;
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const auto name = json_get<std::string>(piece["SpecialToken"], "id", piece_where);
      Ids ids = template_token_ids(special_tokens, name, where);
      Ids& target = seen_sequence ? suffix : prefix;
      target.insert(target.end(), ids.begin(), ids.end());
    } else {
      FURLONG_FAIL(piece_where, ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got ",
                   json_excerpt(piece));
    }
  }
  FURLONG_CHECK(seen_sequence, where, ": the single template never uses sequence A");
  return std::make_unique<PostProcessor>(std::move(prefix), std::move(suffix));
}

// RobertaProcessing / BertProcessing: "cls" before, "sep" after, each a [token, id] pair.
std::unique_ptr<PostProcessor> make_cls_sep(const Json& spec, const std::string& where) {
  auto id_of = [&](const char* field) {
    auto it = spec.find(field);
    FURLONG_CHECK(it != spec.end() && it->is_array() && it->size() == 2 &&
                      (*it)[1].is_number_integer() && (*it)[1].get<int64_t>() >= 0,
                  where, ": field '", field, "' must be [token, id]");
    return (*it)[1].get<int64_t>();
  };
  return std::make_unique<PostProcessor>(Ids{id_of("cls")}, Ids{id_of("sep")});
}

std::unique_ptr<PostProcessor> make_sequence(const Json& spec, const std::string& where) {
  auto it = spec.find("processors");
  FURLONG_CHECK(it != spec.end() && it->is_array(), where, ": field 'processors' must be an array");
  Ids prefix, suffix;
  for (size_t i = 0; i < it->size(); ++i) {
    auto step = make_post_processor((*it)[i], where + ".processors[" + std::to_string(i) + "]");
    if (!step) continue;
    Ids ids{-1};  // marks where the sequence sits
    step->apply(ids);
    size_t mark = 0;
    while (ids[mark] != -1) ++mark;
    prefix.insert(prefix.begin(), ids.begin(), ids.begin() + mark);
    suffix.insert(suffix.end(), ids.begin() + mark + 1, ids.end());
  }
  return std::make_unique<PostProcessor>(std::move(prefix), std::move(suffix));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const auto type = json_get<std::string>(spec, "type", where);
  if (type == "ByteLevel") return std::make_unique<PostProcessor>(Ids{}, Ids{});
  if (type == "TemplateProcessing") return make_template(spec, where);
  if (type == "RobertaProcessing" || type == "BertProcessing") return make_cls_sep(spec, where);
  if (type == "Sequence") return make_sequence(spec, where);
  FURLONG_FAIL(where, ": unsupported post_processor type '", type,
               "' (supported: ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, "
               "Sequence)");
}

}  // namespace furlong::tokenizer
