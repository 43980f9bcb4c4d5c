#include "reward/rewards.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/strings.h"
#include "reward/final_number.h"
#include "reward/math_grader.h"
#include "reward/text_rewards.h"
#include "reward/text_util.h"

namespace furlong::reward {
namespace {

constexpr std::string_view kBoxedPrefix = "boxed_";
constexpr std::string_view kRemote = "remote_rm";

// furlong's own graders, in RewardKind's order.
struct Builtin {
  const char* name;
  RewardFunction function;
};

const std::vector<Builtin>& builtins() {
  static const std::vector<Builtin> list = {
      {"math",
       [](std::string_view r, std::string_view l, const Json&) { return Json(math_reward(r, l)); }},
      {"deepscaler", [](std::string_view r, std::string_view l,
                        const Json&) { return Json(deepscaler_reward(r, l)); }},
      {"dapo",
       [](std::string_view r, std::string_view l, const Json&) { return dapo_reward(r, l); }},
      {"f1",
       [](std::string_view r, std::string_view l, const Json&) { return Json(f1_reward(r, l)); }},
      {"exact_match", [](std::string_view r, std::string_view l,
                         const Json&) { return Json(exact_match_reward(r, l)); }},
      {"final_number", [](std::string_view r, std::string_view l,
                          const Json&) { return Json(final_number_reward(r, l)); }},
  };
  return list;
}

// The types register_reward_type added, by name. Guarded by a mutex so a registration at
// startup cannot race a lookup.
struct Registry {
  std::mutex mutex;
  std::vector<std::string> names;
  std::map<std::string, RewardFunction> functions;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

std::optional<RewardKind> builtin_kind(std::string_view base) {
  const auto& list = builtins();
  for (size_t i = 0; i < list.size(); ++i) {
    if (base == list[i].name) return static_cast<RewardKind>(i);
  }
  return std::nullopt;
}

bool is_registered(const std::string& base) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.functions.contains(base);
}

[[noreturn]] void fail_unknown(const std::string& name, const std::string& where) {
  const std::vector<std::string> known = known_reward_types();
  const std::string known_text = join(known, ", ");
  FURLONG_CHECK(
      !name.empty(), where,
      ": no reward type; set --rm-type or the sample's metadata.rm_type (known: ", known_text, ")");
  auto guess = closest_match(name, known);
  FURLONG_FAIL(where, ": unknown reward type '", name, "'",
               guess ? " (did you mean '" + *guess + "'?)" : std::string(), "; known: ", known_text,
               " (each also as boxed_<type>)");
}

}  // namespace

RewardType parse_reward_type(const std::string& name, const std::string& where) {
  RewardType type;
  type.boxed = name.starts_with(kBoxedPrefix);
  const std::string base = type.boxed ? name.substr(kBoxedPrefix.size()) : name;
  if (auto kind = builtin_kind(base)) {
    type.kind = *kind;
  } else if (base == kRemote) {
    type.kind = RewardKind::kRemote;
  } else if (!base.empty() && is_registered(base)) {
    type.kind = RewardKind::kRegistered;
    type.registered = base;
  } else {
    fail_unknown(name, where);
  }
  return type;
}

std::string reward_type_name(const RewardType& type) {
  std::string base;
  switch (type.kind) {
    case RewardKind::kRemote:
      base = kRemote;
      break;
    case RewardKind::kRegistered:
      base = type.registered;
      break;
    default:
      base = builtins().at(static_cast<size_t>(type.kind)).name;
  }
  return type.boxed ? std::string(kBoxedPrefix) + base : base;
}

std::vector<std::string> known_reward_types() {
  std::vector<std::string> names;
  for (const auto& b : builtins()) names.emplace_back(b.name);
  names.emplace_back(kRemote);  // served by RemoteRewardClient, not a local function
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  names.insert(names.end(), r.names.begin(), r.names.end());
  return names;
}

bool is_builtin_reward_type(const std::string& rm_type) {
  const std::string_view base = rm_type.starts_with(kBoxedPrefix)
                                    ? std::string_view(rm_type).substr(kBoxedPrefix.size())
                                    : std::string_view(rm_type);
  return builtin_kind(base).has_value();
}

void register_reward_type(const std::string& name, RewardFunction function) {
  FURLONG_CHECK(!name.empty() && !name.starts_with(kBoxedPrefix) && name != kRemote,
                "reward type name '", name, "' is empty, reserved or starts with boxed_");
  FURLONG_CHECK(static_cast<bool>(function), "reward type '", name, "' needs a function");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  FURLONG_CHECK(!r.functions.contains(name) && !builtin_kind(name), "reward type '", name,
                "' is already registered");
  r.names.push_back(name);
  r.functions[name] = std::move(function);
}

Json builtin_reward(const RewardType& type, std::string_view response, std::string_view label,
                    const Json& metadata) {
  if (type.boxed) {
    std::string boxed = last_boxed_content(response).value_or("");
    RewardType base = type;
    base.boxed = false;
    return builtin_reward(base, boxed, label, metadata);
  }
  if (type.builtin()) {
    return builtins().at(static_cast<size_t>(type.kind)).function(response, label, metadata);
  }
  FURLONG_CHECK(type.kind == RewardKind::kRegistered, "reward type '", kRemote,
                "' is served by a reward server (--rm-url), not locally");
  RewardFunction fn;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    fn = r.functions.at(type.registered);
  }
  return fn(response, label, metadata);
}

Json builtin_reward(const std::string& rm_type, std::string_view response, std::string_view label,
                    const Json& metadata) {
  return builtin_reward(parse_reward_type(rm_type, "--rm-type"), response, label, metadata);
}

double select_reward_value(const Json& reward, const std::string& reward_key,
                           const std::string& where) {
  const Json* value = &reward;
  if (reward.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : reward.items()) keys.push_back(k);
    FURLONG_CHECK(!reward_key.empty(), where, ": the reward is an object with keys {",
                  join(keys, ", "), "}; choose one with --reward-key");
    auto it = reward.find(reward_key);
    FURLONG_CHECK(it != reward.end(), where, ": --reward-key '", reward_key,
                  "' is not in the reward object (keys: ", join(keys, ", "), ")");
    value = &*it;
  }
  if (value->is_boolean()) return value->get<bool>() ? 1.0 : 0.0;
  FURLONG_CHECK(value->is_number(), where, ": a reward must be a number (or an object with one at ",
                "--reward-key), got ", json_type_name(*value), " ", json_excerpt(*value));
  return value->get<double>();
}

RewardGrader::RewardGrader(RewardOptions options) : options_(std::move(options)) {
  FURLONG_CHECK(options_.max_concurrency >= 1, "reward concurrency must be >= 1, got ",
                options_.max_concurrency);
  const bool remote_type = options_.rm_type && options_.rm_type->remote();
  FURLONG_CHECK(!remote_type || !options_.remote.url.empty(),
                "--rm-type remote_rm needs --rm-url (the reward server's http:// address)");
  if (!options_.remote.url.empty()) {
    remote_ = std::make_unique<RemoteRewardClient>(options_.remote);
  }
}

RewardGrader::~RewardGrader() = default;

RewardType RewardGrader::rm_type_for(const rl::Sample& sample) const {
  const std::string where = "sample " + std::to_string(sample.index);
  if (sample.metadata.is_object()) {
    auto it = sample.metadata.find("rm_type");
    if (it != sample.metadata.end() && it->is_string()) {
      return parse_reward_type(it->get<std::string>(), where);
    }
  }
  if (!options_.rm_type) fail_unknown("", where);
  return *options_.rm_type;
}

Json RewardGrader::score(const rl::Sample& sample) const {
  const RewardType type = rm_type_for(sample);
  if (type.remote()) {
    FURLONG_CHECK(remote_ != nullptr, "sample ", sample.index,
                  ": reward type remote_rm needs --rm-url");
    return remote_->score(sample);
  }
  return builtin_reward(type, graded_text(sample, type), sample.label, sample.metadata);
}

std::string RewardGrader::graded_text(const rl::Sample& sample, const RewardType& type) const {
  if (options_.special_tokens.empty() || !type.builtin()) return sample.response;
  return remove_strings(sample.response, options_.special_tokens);
}

RewardStats RewardGrader::compute_rewards(std::vector<rl::Sample>& samples) const {
  std::vector<rl::Sample*> pointers;
  pointers.reserve(samples.size());
  for (auto& s : samples) pointers.push_back(&s);
  return compute_rewards(pointers);
}

RewardStats RewardGrader::compute_rewards(const std::vector<rl::Sample*>& samples) const {
  std::vector<rl::Sample*> todo;
  RewardStats stats;
  for (rl::Sample* s : samples) {
    if (s->status == rl::SampleStatus::kAborted) {
      ++stats.skipped_aborted;
    } else {
      todo.push_back(s);
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<int64_t> failures{0};
  std::mutex error_mutex;
  std::exception_ptr first_error;
  auto worker = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      rl::Sample& s = *todo[i];
      const std::string where = "sample " + std::to_string(s.index);
      try {
        Json raw;
        try {
          raw = score(s);
        } catch (const Error& e) {
          if (options_.fail_on_remote_error || !rm_type_for(s).remote()) throw;
          ++failures;
          if (!s.metadata.is_object()) s.metadata = Json::object();
          s.metadata["reward_error"] = e.what();
          raw = 0.0;
        }
        double value = select_reward_value(raw, options_.reward_key, where);
        s.raw_reward = value;
        s.reward = value;
        if (raw.is_object()) s.metadata["reward"] = raw;
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        next = todo.size();  // stop handing out work
      }
    }
  };
  // Remote requests wait on the network, so up to max_concurrency run at once; local graders
  // are CPU-bound and use at most one thread per core.
  size_t limit = size_t(options_.max_concurrency);
  if (!remote_) limit = std::min<size_t>(limit, std::max(1u, std::thread::hardware_concurrency()));
  const size_t threads = std::min(todo.size(), limit);
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (first_error) std::rethrow_exception(first_error);
  stats.scored = static_cast<int64_t>(todo.size());
  stats.remote_failures = failures;
  return stats;
}

}  // namespace furlong::reward
