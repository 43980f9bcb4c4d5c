// Normalizers: the Unicode normal forms (ICU) and Sequence, as a tokenizer.json "normalizer"
// value describes them. Other HF normalizer types are rejected with an error naming them.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace furlong::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes valid UTF-8 text in place.
  virtual void normalize(std::string& text) const = 0;
};

// nullptr for a null spec. `where` names the file and field in errors.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace furlong::tokenizer
