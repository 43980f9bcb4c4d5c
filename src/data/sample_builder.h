// Building rl::Sample objects on the rollout side: prompt
// groups with their running group/sample ids, the token budget of one generate call, and
// folding an engine response (token ids, log-probs, finish reason) into a sample.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dynamic_filter.h"
#include "data/prompt_dataset.h"
#include "rl/sample.h"

namespace furlong::data {

// finish_reason.type -> status: "stop" -> completed, "length" -> truncated, "abort" -> aborted.
// Anything else is a furlong::Error naming the value.
rl::SampleStatus status_from_finish_reason(std::string_view finish_reason);

// max_new_tokens of a request (section 2.2): --rollout-max-response-len minus the tokens
// already generated (partial resume), additionally capped by --rollout-max-context-len minus
// the input length. A result <= 0 means no request is sent and the sample is TRUNCATED.
int64_t max_new_tokens_for(int64_t input_length, int64_t already_generated,
                           int64_t max_response_len, std::optional<int64_t> max_context_len);

// What one engine generate call returned.
struct GeneratedResponse {
  std::vector<int64_t> token_ids;
  std::vector<float> log_probs;  // one per token, or empty when log-probs were not requested
  std::string finish_reason;     // "stop" | "length" | "abort"
  std::string text;              // decoded output text
};

// Appends one generate call's output to `sample` (tokens, response_length, loss mask 1 per token,
// rollout log-probs, response text) and sets its status from the finish reason. The sample's
// tokens must already hold its input (the prompt ids on the first call). `max_new_tokens` is the
// budget the request was sent with: a longer output is an error (the engine broke its contract).
void append_response(rl::Sample& sample, const GeneratedResponse& output, int64_t max_new_tokens);

// A sample of prompt_ids + output (append_response on a fresh sample).
rl::Sample make_sample(const std::vector<int64_t>& prompt_ids, const GeneratedResponse& output,
                       int64_t max_new_tokens);

// Marks a sample that got no token budget (max_new_tokens_for <= 0): TRUNCATED, no response.
void mark_no_budget(rl::Sample& sample);

// n_samples copies of `prompt` (status pending, tokens = prompt ids, no response), with
// group_index and indices first_index, first_index+1, ...
std::vector<rl::Sample> make_group(const Prompt& prompt, int64_t n_samples, int64_t group_index,
                                   int64_t first_index);

// The data source of the collection loop: prompts from a PromptDataset turned into groups of
// n_samples_per_prompt samples, with group_index / index counters that run over the whole job
// and are part of the resumable state.
class RolloutDataSource {
 public:
  RolloutDataSource(PromptDataset& dataset, int64_t n_samples_per_prompt);
  // The next `num_groups` groups: first those waiting in `buffer` (partial rollout; may be
  // null), oldest first, then fresh prompts.
  std::vector<SampleGroup> next_groups(int64_t num_groups, RolloutBuffer* buffer = nullptr);
  int64_t n_samples_per_prompt() const { return n_samples_; }
  // The dataset state plus {"next_group_index", "next_sample_index"}.
  Json state() const;
  void load_state(const Json& state);

 private:
  PromptDataset* dataset_;
  int64_t n_samples_;
  int64_t next_group_index_ = 0;
  int64_t next_sample_index_ = 0;
};

}  // namespace furlong::data
