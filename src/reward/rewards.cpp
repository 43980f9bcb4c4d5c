#include "reward/rewards.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <map>
#include <mutex>
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

// Name -> function. Built-ins first; register_reward_type adds more. Guarded by a mutex so a
// registration at startup cannot race a lookup.
struct Registry {
  std::mutex mutex;
  std::vector<std::string> names;
  std::map<std::string, RewardFunction> functions;
  size_t num_builtin = 0;  // names[0, num_builtin) are furlong's own graders

  Registry() {
    add("math", [](std::string_view r, std::string_view l, const Json&) {
      return Json(math_reward(r, l));
    });
    add("deepscaler", [](std::string_view r, std::string_view l, const Json&) {
      return Json(deepscaler_reward(r, l));
    });
    add("dapo",
        [](std::string_view r, std::string_view l, const Json&) { return dapo_reward(r, l); });
    add("f1",
        [](std::string_view r, std::string_view l, const Json&) { return Json(f1_reward(r, l)); });
    add("exact_match", [](std::string_view r, std::string_view l, const Json&) {
      return Json(exact_match_reward(r, l));
    });
    add("final_number", [](std::string_view r, std::string_view l, const Json&) {
      return Json(final_number_reward(r, l));
    });
    num_builtin = names.size();
    names.emplace_back(kRemote);  // served by RemoteRewardClient, not a local function
  }
  void add(const std::string& name, RewardFunction fn) {
    names.push_back(name);
    functions[name] = std::move(fn);
  }
};

Registry& registry() {
  static Registry instance;
  return instance;
}

std::string base_type(const std::string& rm_type) {
  return rm_type.starts_with(kBoxedPrefix) ? rm_type.substr(kBoxedPrefix.size()) : rm_type;
}

void check_known(const std::string& rm_type, const std::string& where) {
  const std::vector<std::string> known = known_reward_types();
  const std::string known_text = join(known, ", ");
  FURLONG_CHECK(
      !rm_type.empty(), where,
      ": no reward type; set --rm-type or the sample's metadata.rm_type (known: ", known_text, ")");
  if (std::find(known.begin(), known.end(), base_type(rm_type)) != known.end()) return;
  auto guess = closest_match(rm_type, known);
  FURLONG_FAIL(where, ": unknown reward type '", rm_type, "'",
               guess ? " (did you mean '" + *guess + "'?)" : std::string(), "; known: ", known_text,
               " (each also as boxed_<type>)");
}

}  // namespace

std::vector<std::string> known_reward_types() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.names;
}

bool is_builtin_reward_type(const std::string& rm_type) {
  Registry& r = registry();
  const std::string base = base_type(rm_type);
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto end = r.names.begin() + static_cast<std::ptrdiff_t>(r.num_builtin);
  return std::find(r.names.begin(), end, base) != end;
}

void register_reward_type(const std::string& name, RewardFunction function) {
  FURLONG_CHECK(!name.empty() && !name.starts_with(kBoxedPrefix) && name != kRemote,
                "reward type name '", name, "' is empty, reserved or starts with boxed_");
  FURLONG_CHECK(static_cast<bool>(function), "reward type '", name, "' needs a function");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  FURLONG_CHECK(!r.functions.contains(name), "reward type '", name, "' is already registered");
  r.add(name, std::move(function));
}

Json builtin_reward(const std::string& rm_type, std::string_view response, std::string_view label,
                    const Json& metadata) {
  check_known(rm_type, "--rm-type");
  if (rm_type.starts_with(kBoxedPrefix)) {
    std::string boxed = last_boxed_content(response).value_or("");
    return builtin_reward(base_type(rm_type), boxed, label, metadata);
  }
  RewardFunction fn;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.functions.find(rm_type);
    FURLONG_CHECK(it != r.functions.end(), "reward type '", rm_type,
                  "' is served by a reward server (--rm-url), not locally");
    fn = it->second;
  }
  return fn(response, label, metadata);
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
  if (!options_.rm_type.empty()) check_known(options_.rm_type, "--rm-type");
  const bool remote_type = options_.rm_type == kRemote;
  FURLONG_CHECK(!remote_type || !options_.remote.url.empty(),
                "--rm-type remote_rm needs --rm-url (the reward server's http:// address)");
  if (!options_.remote.url.empty()) {
    remote_ = std::make_unique<RemoteRewardClient>(options_.remote);
  }
}

RewardGrader::~RewardGrader() = default;

std::string RewardGrader::rm_type_for(const rl::Sample& sample) const {
  if (sample.metadata.is_object()) {
    auto it = sample.metadata.find("rm_type");
    if (it != sample.metadata.end() && it->is_string()) return it->get<std::string>();
  }
  return options_.rm_type;
}

Json RewardGrader::score(const rl::Sample& sample) const {
  const std::string where = "sample " + std::to_string(sample.index);
  const std::string rm_type = rm_type_for(sample);
  check_known(rm_type, where);
  if (rm_type == kRemote) {
    FURLONG_CHECK(remote_ != nullptr, where, ": reward type remote_rm needs --rm-url");
    return remote_->score(sample);
  }
  return builtin_reward(rm_type, graded_text(sample, rm_type), sample.label, sample.metadata);
}

std::string RewardGrader::graded_text(const rl::Sample& sample, const std::string& rm_type) const {
  if (options_.special_tokens.empty() || !is_builtin_reward_type(rm_type)) return sample.response;
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
          if (options_.fail_on_remote_error || rm_type_for(s) != kRemote) throw;
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
