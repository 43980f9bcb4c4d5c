#include "tokenizer/normalizer.h"

#include <vector>

#include "core/json_util.h"
#include "tokenizer/unicode.h"

namespace furlong::tokenizer {
namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { unicode::normalize(form_, text); }

 private:
  unicode::NormalForm form_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

std::unique_ptr<Normalizer> make_sequence(const Json& spec, const std::string& where) {
  auto it = spec.find("normalizers");
  FURLONG_CHECK(it != spec.end() && it->is_array(), where,
                ": field 'normalizers' must be an array");
  std::vector<std::unique_ptr<Normalizer>> steps;
  for (size_t i = 0; i < it->size(); ++i) {
    auto step = make_normalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]");
    if (step) steps.push_back(std::move(step));
  }
  return std::make_unique<SequenceNormalizer>(std::move(steps));
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const auto type = json_get<std::string>(spec, "type", where);
  if (type == "Sequence") return make_sequence(spec, where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFKD);
  FURLONG_FAIL(where, ": unsupported normalizer type '", type,
               "' (supported: NFC, NFD, NFKC, NFKD, Sequence)");
}

}  // namespace furlong::tokenizer
