// Pre-tokenizers: split normalized text into the pieces BPE sees, as HF's pre_tokenizer
// section describes (Sequence, Split with a regex or literal pattern, ByteLevel).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tokenizer/function_ref.h"

namespace furlong::tokenizer {

using PieceSink = FunctionRef<void(std::string_view)>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Passes the pieces of `text` (valid UTF-8), in order, to `sink`; never an empty piece.
  virtual void split(std::string_view text, PieceSink sink) const = 0;
};

// Builds the pre-tokenizer a tokenizer.json "pre_tokenizer" value describes; nullptr for null.
// `where` names the file and field in errors (unsupported type, bad fields, bad regex).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec,
                                                 const std::string& where);

}  // namespace furlong::tokenizer
