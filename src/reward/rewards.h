// Rewards (miles' rm_hub): the built-in reward types behind --rm-type, the remote reward server,
// --reward-key selection, and the batch entry point that scores a rollout's samples.
//
// Resolution per sample: metadata["rm_type"] (a string) overrides --rm-type. A "boxed_" prefix
// first replaces the response with the content of its last \boxed{...} (empty if none) and then
// applies the base type. A reward is a JSON number (or bool) or an object; --reward-key selects
// the value of an object. Built-in types read the response without the tokenizer's special
// tokens (RewardOptions::special_tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_util.h"
#include "reward/remote_reward.h"
#include "reward/reward_type.h"
#include "rl/sample.h"

namespace furlong::reward {

// A local reward function: the raw reward (a number or an object) of a response.
using RewardFunction =
    std::function<Json(std::string_view response, std::string_view label, const Json& metadata)>;

// The reward types --rm-type accepts (base names; each also works with the boxed_ prefix):
// math, deepscaler, dapo, f1, exact_match, final_number, remote_rm, then any registered ones.
std::vector<std::string> known_reward_types();
// Whether `rm_type` (with or without the boxed_ prefix) is one of furlong's own rule-based
// graders: every known type except remote_rm and the registered ones.
bool is_builtin_reward_type(const std::string& rm_type);
// Adds a reward type (the C++ counterpart of miles' custom_rm_path). Names must be new, not
// remote_rm and not start with boxed_. Thread-safe; `function` may be called concurrently.
void register_reward_type(const std::string& name, RewardFunction function);

// The raw reward of a local (non-remote) type, with an optional boxed_ prefix. Unknown (or
// empty) type names are a furlong::Error listing the known ones.
Json builtin_reward(const RewardType& type, std::string_view response, std::string_view label,
                    const Json& metadata);
Json builtin_reward(const std::string& rm_type, std::string_view response, std::string_view label,
                    const Json& metadata);

// The scalar of a raw reward: a number as is, a bool as 1/0, an object's value at `reward_key`
// (which must be given and present). `where` names the sample in errors.
double select_reward_value(const Json& reward, const std::string& reward_key,
                           const std::string& where);

// The text each special token decodes to (the tokens decode(..., skip_special_tokens=true)
// drops), for RewardOptions::special_tokens. A template so that this layer needs no tokenizer
// library: `Tokenizer` has vocab_size(), is_special(id) and decode(ids, skip_special_tokens), as
// furlong::tokenizer::Tokenizer does.
template <class Tokenizer>
std::vector<std::string> special_token_strings(const Tokenizer& tokenizer) {
  std::vector<std::string> out;
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) continue;
    std::string text = tokenizer.decode(std::vector<int64_t>{id}, false);
    if (!text.empty()) out.push_back(std::move(text));
  }
  return out;
}

struct RewardOptions {
  std::optional<RewardType> rm_type;  // --rm-type (unset if every sample sets metadata.rm_type)
  std::string reward_key;             // --reward-key
  // The tokenizer's special-token strings (<|im_end|>, ...). Built-in types grade the response
  // with these removed, whatever --rollout-skip-special-tokens kept in sample.response, so that
  // "19<|im_end|>" matches "19"; remote_rm and registered types get sample.response unchanged.
  std::vector<std::string> special_tokens;
  RemoteRewardOptions remote;  // --rm-url and its timeout / retry policy
  int max_concurrency = 32;    // samples scored at once (remote requests in flight)
  // false: a remote request that fails after its retries is counted, the sample gets reward 0 and
  // metadata["reward_error"]; true: it is a furlong::Error.
  bool fail_on_remote_error = true;
};

struct RewardStats {
  int64_t scored = 0;
  int64_t skipped_aborted = 0;  // ABORTED samples get no reward
  int64_t remote_failures = 0;  // counted failures (fail_on_remote_error = false)
};

// Grades a rollout's samples: dispatches each to its rule-based grader (--rm-type, or the
// sample's metadata rm_type) or to the remote reward server (--rm-url). Not a learned model.
class RewardGrader {
 public:
  explicit RewardGrader(RewardOptions options);
  ~RewardGrader();

  // The reward type of `sample` (metadata.rm_type over --rm-type); an error names the sample.
  RewardType rm_type_for(const rl::Sample& sample) const;
  // The raw reward of one sample (number or object).
  Json score(const rl::Sample& sample) const;
  // The text the grader of `type` reads for `sample`: the response without special tokens
  // for built-in types, the response as it is for the others.
  std::string graded_text(const rl::Sample& sample, const RewardType& type) const;
  // Scores every sample that is not ABORTED, up to max_concurrency at once, and sets raw_reward
  // and reward to the selected value (reward is replaced later by group normalization). An
  // object reward is also kept whole in metadata["reward"].
  RewardStats compute_rewards(std::vector<rl::Sample>& samples) const;
  RewardStats compute_rewards(const std::vector<rl::Sample*>& samples) const;

  const RewardOptions& options() const { return options_; }
  // The remote client (null unless remote_rm is in use).
  const RemoteRewardClient* remote() const { return remote_.get(); }

 private:
  RewardOptions options_;
  std::unique_ptr<RemoteRewardClient> remote_;
};

}  // namespace furlong::reward
