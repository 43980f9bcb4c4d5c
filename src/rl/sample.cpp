#include "rl/sample.h"

#include "core/error.h"

namespace furlong::rl {

double Sample::mask_sum() const {
  if (remove) return 0.0;
  double s = 0.0;
  for (float m : loss_mask) s += m;
  return s;
}

int64_t Sample::oldest_weight_version(int64_t fallback) const {
  if (weight_versions.empty()) return fallback;
  int64_t oldest = weight_versions.front();
  for (int64_t v : weight_versions) oldest = v < oldest ? v : oldest;
  return oldest;
}

void validate_sample(const Sample& s, const std::string& where) {
  FURLONG_CHECK(
      s.response_length >= 0 && s.response_length <= static_cast<int64_t>(s.tokens.size()), where,
      ": response_length ", s.response_length, " exceeds the ", s.tokens.size(), " tokens");
  FURLONG_CHECK(s.prompt_length() >= 1, where,
                ": a sample needs at least one prompt token before the response");
  FURLONG_CHECK(static_cast<int64_t>(s.loss_mask.size()) == s.response_length, where,
                ": loss_mask has ", s.loss_mask.size(), " entries for a response of ",
                s.response_length, " tokens");
  FURLONG_CHECK(s.rollout_log_probs.empty() ||
                    static_cast<int64_t>(s.rollout_log_probs.size()) == s.response_length,
                where, ": rollout_log_probs has ", s.rollout_log_probs.size(),
                " entries for a response of ", s.response_length, " tokens");
  FURLONG_CHECK(s.weight_versions.empty() ||
                    static_cast<int64_t>(s.weight_versions.size()) == s.response_length,
                where, ": weight_versions has ", s.weight_versions.size(),
                " entries for a response of ", s.response_length, " tokens");
  const auto& r = s.routed_experts;
  if (!r.empty()) {
    const auto expected = static_cast<int64_t>(s.tokens.size()) * r.num_layers * r.top_k;
    FURLONG_CHECK(r.num_layers > 0 && r.top_k > 0 && static_cast<int64_t>(r.ids.size()) == expected,
                  where, ": routed_experts has ", r.ids.size(), " ids, expected ", s.tokens.size(),
                  " tokens x ", r.num_layers, " layers x ", r.top_k, " experts per token");
  }
}

}  // namespace furlong::rl
