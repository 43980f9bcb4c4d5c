// A training sample as the rollout side hands it to the trainer (miles' Sample fields that
// training reads). tokens = prompt tokens + response tokens; the last response_length tokens
// are the response, and loss_mask / rollout_log_probs have one entry per response token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "core/routed_experts.h"

namespace furlong::rl {

using furlong::RoutedExperts;

enum class SampleStatus { kPending, kCompleted, kTruncated, kAborted, kFailed };

struct Sample {
  int64_t index = 0;        // unique id (ordering)
  int64_t group_index = 0;  // prompt group (reward normalization)
  std::vector<int64_t> tokens;
  int64_t response_length = 0;
  std::vector<float> loss_mask;          // response_length entries, 0 or 1
  std::vector<float> rollout_log_probs;  // response_length entries (RL; may be empty)
  // The engine weight version that produced each response token (response_length entries, or
  // empty when unknown). A partial rollout resumed under newer weights holds several versions;
  // tokens that are not the model's (loss mask 0 turns) carry the version of the turn before.
  std::vector<int64_t> weight_versions;
  double reward = 0.0;  // after group normalization (RL)
  double raw_reward = 0.0;
  SampleStatus status = SampleStatus::kCompleted;
  bool remove = false;  // excluded from the loss (mask treated as zeros)
  std::string label;
  Json metadata = Json::object();
  // Rollout side (miles' Sample.prompt / .response): the prompt as the dataset gave it (a
  // templated string or a message list) and the decoded response text that rewards grade.
  Json prompt;
  std::string response;
  // The engine's expert choices (MoE models with --use-rollout-routing-replay); empty otherwise.
  RoutedExperts routed_experts;

  int64_t prompt_length() const { return static_cast<int64_t>(tokens.size()) - response_length; }
  // Sum of the loss mask (the per-sample loss denominator, at least 1 when used).
  double mask_sum() const;
  // The oldest weight version among the response tokens; `fallback` when none is recorded.
  int64_t oldest_weight_version(int64_t fallback) const;
};

// Checks the invariants above; `where` names the sample in errors.
void validate_sample(const Sample& sample, const std::string& where);

}  // namespace furlong::rl
