// Post-processors: what encode(add_special_tokens=true) adds around a single sequence, as a
// tokenizer.json "post_processor" value describes (ByteLevel adds nothing; TemplateProcessing,
// RobertaProcessing and BertProcessing add their special tokens; Sequence applies each).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace furlong::tokenizer {

class PostProcessor {
 public:
  // A post-processor reduces, for one sequence, to ids placed before and after it.
  PostProcessor(std::vector<int64_t> prefix, std::vector<int64_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void apply(std::vector<int64_t>& ids) const {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }
  bool adds_nothing() const { return prefix_.empty() && suffix_.empty(); }

 private:
  std::vector<int64_t> prefix_, suffix_;
};

// nullptr for a null spec. `where` names the file and field in errors.
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& spec,
                                                   const std::string& where);

}  // namespace furlong::tokenizer
