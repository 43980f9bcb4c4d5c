#include "data/sample_builder.h"

#include <algorithm>

#include "core/error.h"

namespace furlong::data {

void fill_weight_versions(rl::Sample& sample, int64_t version_if_none) {
  auto& versions = sample.weight_versions;
  FURLONG_CHECK(static_cast<int64_t>(versions.size()) <= sample.response_length, "sample ",
                sample.index, ": ", versions.size(), " weight versions for a response of ",
                sample.response_length, " tokens");
  const int64_t fill = versions.empty() ? version_if_none : versions.back();
  versions.resize(static_cast<size_t>(sample.response_length), fill);
}

rl::SampleStatus status_from_finish_reason(std::string_view finish_reason) {
  if (finish_reason == "stop") return rl::SampleStatus::kCompleted;
  if (finish_reason == "length") return rl::SampleStatus::kTruncated;
  if (finish_reason == "abort") return rl::SampleStatus::kAborted;
  FURLONG_FAIL("unknown finish reason '", finish_reason,
               "' from the engine (expected stop, length or abort)");
}

int64_t max_new_tokens_for(int64_t input_length, int64_t already_generated,
                           int64_t max_response_len, std::optional<int64_t> max_context_len) {
  FURLONG_CHECK(max_response_len >= 1, "--rollout-max-response-len must be >= 1, got ",
                max_response_len);
  int64_t budget = max_response_len - already_generated;
  if (max_context_len) budget = std::min(budget, *max_context_len - input_length);
  return budget;
}

void append_response(rl::Sample& sample, const GeneratedResponse& output, int64_t max_new_tokens) {
  const auto n = static_cast<int64_t>(output.token_ids.size());
  FURLONG_CHECK(output.log_probs.empty() || output.log_probs.size() == output.token_ids.size(),
                "sample ", sample.index, ": the engine returned ", output.log_probs.size(),
                " log-probs for ", n, " tokens");
  FURLONG_CHECK(n <= max_new_tokens, "sample ", sample.index, ": the engine returned ", n,
                " tokens for a request of max_new_tokens ", max_new_tokens);
  FURLONG_CHECK(
      sample.rollout_log_probs.size() == sample.loss_mask.size() || output.log_probs.empty(),
      "sample ", sample.index,
      ": log-probs are missing for earlier response tokens; cannot append more");
  fill_weight_versions(sample, output.weight_version);
  rl::SampleStatus status = status_from_finish_reason(output.finish_reason);
  sample.tokens.insert(sample.tokens.end(), output.token_ids.begin(), output.token_ids.end());
  sample.response_length += n;
  sample.loss_mask.insert(sample.loss_mask.end(), static_cast<size_t>(n), 1.0f);
  sample.rollout_log_probs.insert(sample.rollout_log_probs.end(), output.log_probs.begin(),
                                  output.log_probs.end());
  sample.weight_versions.insert(sample.weight_versions.end(), static_cast<size_t>(n),
                                output.weight_version);
  sample.response += output.text;
  sample.status = status;
}

void append_observation(rl::Sample& sample, const std::vector<int64_t>& token_ids) {
  const auto n = token_ids.size();
  const bool with_log_probs =
      !sample.loss_mask.empty() && sample.rollout_log_probs.size() == sample.loss_mask.size();
  sample.tokens.insert(sample.tokens.end(), token_ids.begin(), token_ids.end());
  sample.response_length += static_cast<int64_t>(n);
  sample.loss_mask.insert(sample.loss_mask.end(), n, 0.0f);
  if (with_log_probs) sample.rollout_log_probs.insert(sample.rollout_log_probs.end(), n, 0.0f);
  fill_weight_versions(sample, /*version_if_none=*/0);  // the last model turn's version
}

rl::Sample make_sample(const std::vector<int64_t>& prompt_ids, const GeneratedResponse& output,
                       int64_t max_new_tokens) {
  FURLONG_CHECK(!prompt_ids.empty(), "a sample needs at least one prompt token");
  rl::Sample sample;
  sample.tokens = prompt_ids;
  sample.response_length = 0;
  append_response(sample, output, max_new_tokens);
  return sample;
}

bool needs_generation(const rl::Sample& sample) {
  return sample.status == rl::SampleStatus::kPending || sample.status == rl::SampleStatus::kAborted;
}

void mask_offpolicy_prefix(rl::Sample& sample) {
  std::fill(sample.loss_mask.begin(), sample.loss_mask.end(), 0.0f);
}

void restart_sample(rl::Sample& sample) {
  sample.tokens.resize(static_cast<size_t>(sample.prompt_length()));
  sample.response_length = 0;
  sample.loss_mask.clear();
  sample.rollout_log_probs.clear();
  sample.weight_versions.clear();
  sample.routed_experts = {};
  sample.response.clear();
  sample.status = rl::SampleStatus::kPending;
  sample.raw_reward = 0.0;
  sample.reward = 0.0;
}

void mark_no_budget(rl::Sample& sample) {
  sample.status = rl::SampleStatus::kTruncated;
}

std::vector<rl::Sample> make_group(const Prompt& prompt, int64_t n_samples, int64_t group_index,
                                   int64_t first_index) {
  FURLONG_CHECK(n_samples >= 1, "--n-samples-per-prompt must be >= 1, got ", n_samples);
  std::vector<rl::Sample> group(static_cast<size_t>(n_samples));
  for (int64_t j = 0; j < n_samples; ++j) {
    rl::Sample& s = group[static_cast<size_t>(j)];
    s.index = first_index + j;
    s.group_index = group_index;
    s.tokens = prompt.ids;
    s.response_length = 0;
    s.status = rl::SampleStatus::kPending;
    s.label = prompt.label.value_or("");
    s.metadata = prompt.metadata;
    s.prompt = prompt.prompt.is_string() ? Json(prompt.prompt.get<std::string>())
                                         : Json::parse(prompt.prompt.dump());
  }
  return group;
}

RolloutDataSource::RolloutDataSource(PromptDataset& dataset, int64_t n_samples_per_prompt)
    : dataset_(&dataset), n_samples_(n_samples_per_prompt) {
  FURLONG_CHECK(n_samples_per_prompt >= 1, "--n-samples-per-prompt must be >= 1, got ",
                n_samples_per_prompt);
}

std::vector<SampleGroup> RolloutDataSource::next_groups(int64_t num_groups, RolloutBuffer* buffer) {
  FURLONG_CHECK(num_groups >= 1, "a rollout needs at least one group, got ", num_groups);
  std::vector<SampleGroup> groups;
  if (buffer != nullptr) groups = buffer->pop(num_groups);
  const int64_t fresh = num_groups - static_cast<int64_t>(groups.size());
  if (fresh == 0) return groups;
  for (const Prompt* prompt : dataset_->next_batch(fresh)) {
    groups.push_back(make_group(*prompt, n_samples_, next_group_index_, next_sample_index_));
    ++next_group_index_;
    next_sample_index_ += n_samples_;
  }
  return groups;
}

Json RolloutDataSource::state() const {
  Json state = dataset_->state();
  state["next_group_index"] = next_group_index_;
  state["next_sample_index"] = next_sample_index_;
  return state;
}

void RolloutDataSource::load_state(const Json& state) {
  const std::string where = "rollout data source state";
  auto group_index = json_get<int64_t>(state, "next_group_index", where);
  auto sample_index = json_get<int64_t>(state, "next_sample_index", where);
  FURLONG_CHECK(group_index >= 0 && sample_index >= 0, where, ": counters must be >= 0");
  dataset_->load_state(state);
  next_group_index_ = group_index;
  next_sample_index_ = sample_index;
}

}  // namespace furlong::data
