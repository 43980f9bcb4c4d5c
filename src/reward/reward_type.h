// A reward type as --rm-type or a sample's metadata.rm_type spells it ("math", "boxed_f1",
// "remote_rm", a registered name), parsed once into the grader it selects and whether the
// boxed_ prefix first replaces the response with the content of its last \boxed{...}.
// The set is open (register_reward_type in reward/rewards.h adds names at run time), so a
// registered type keeps its name.
#pragma once

#include <string>
#include <utility>

namespace furlong::reward {

// furlong's own rule-based graders (in this order), the reward server, a registered type.
enum class RewardKind {
  kMath,
  kDeepscaler,
  kDapo,
  kF1,
  kExactMatch,
  kFinalNumber,
  kRemote,  // remote_rm: served by the reward server (--rm-url)
  kRegistered,
};

struct RewardType {
  RewardType() = default;
  explicit RewardType(RewardKind kind, bool boxed = false, std::string registered = "")
      : kind(kind), boxed(boxed), registered(std::move(registered)) {}

  RewardKind kind = RewardKind::kMath;
  bool boxed = false;      // the boxed_ prefix
  std::string registered;  // the registered type's name (kRegistered only)

  // One of furlong's own graders (boxed or not).
  bool builtin() const { return kind < RewardKind::kRemote; }
  // Scored by the reward server: remote_rm without the prefix.
  bool remote() const { return kind == RewardKind::kRemote && !boxed; }
  bool operator==(const RewardType&) const = default;
};

// `name` as a RewardType. An empty or unknown name is an error naming `where` (the flag or the
// sample), with a did-you-mean and the known types.
RewardType parse_reward_type(const std::string& name, const std::string& where);
// The spelling: reward_type_name(parse_reward_type(name, where)) == name.
std::string reward_type_name(const RewardType& type);

}  // namespace furlong::reward
