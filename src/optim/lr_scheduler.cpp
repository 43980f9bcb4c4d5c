// The formulas are written as the spec states them, term by term, so that double arithmetic
// follows the same order as the Python scheduler and yields the same bits.
#include "optim/lr_scheduler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace furlong::optim {

namespace {

std::string join(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& s : list) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The index of `value` in `list` (the flag's spellings), or an error as the flag table words it.
size_t choice_index(const std::vector<std::string>& list, const std::string& value,
                    const char* flag, const std::string& where) {
  auto it = std::find(list.begin(), list.end(), value);
  FURLONG_CHECK(it != list.end(), flag, ": invalid choice '", value, "' (choose from ", join(list),
                ")", where);
  return static_cast<size_t>(it - list.begin());
}

// `state[key]` as T, or an error naming the key.
template <typename T>
T field(const nlohmann::json& state, const char* key) {
  FURLONG_CHECK(state.is_object() && state.contains(key), "LR scheduler state: missing field '",
                key, "'");
  try {
    return state.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    FURLONG_FAIL("LR scheduler state: field '", key, "' has the wrong type (", e.what(), ")");
  }
}

template <typename T>
std::optional<T> optional_field(const nlohmann::json& state, const char* key) {
  if (!state.is_object() || !state.contains(key) || state.at(key).is_null()) return std::nullopt;
  return field<T>(state, key);
}

}  // namespace

const std::vector<std::string>& lr_decay_styles() {
  static const std::vector<std::string> styles = {"constant", "linear", "cosine",
                                                  "inverse-square-root", "WSD"};
  return styles;
}

const std::vector<std::string>& lr_wsd_decay_styles() {
  static const std::vector<std::string> styles = {"linear", "cosine", "exponential", "minus_sqrt"};
  return styles;
}

LrDecayStyle parse_lr_decay_style(const std::string& name, const std::string& where) {
  return static_cast<LrDecayStyle>(
      choice_index(lr_decay_styles(), name, "--lr-decay-style", where));
}

WsdDecayStyle parse_lr_wsd_decay_style(const std::string& name, const std::string& where) {
  return static_cast<WsdDecayStyle>(
      choice_index(lr_wsd_decay_styles(), name, "--lr-wsd-decay-style", where));
}

const std::string& lr_decay_style_name(LrDecayStyle style) {
  return lr_decay_styles().at(static_cast<size_t>(style));
}

const std::string& lr_wsd_decay_style_name(WsdDecayStyle style) {
  return lr_wsd_decay_styles().at(static_cast<size_t>(style));
}

LrScheduler::LrScheduler(const LrScheduleOptions& options, int64_t train_iters)
    : schedule_(resolve(options, train_iters)),
      use_checkpoint_(options.use_checkpoint_lr_scheduler),
      override_(options.override_lr_scheduler) {}

LrScheduler::Schedule LrScheduler::resolve(const LrScheduleOptions& o, int64_t train_iters) {
  FURLONG_CHECK(!(o.override_lr_scheduler && o.use_checkpoint_lr_scheduler),
                "--override-lr-scheduler and --use-checkpoint-lr-scheduler cannot both be on "
                "(the latter is on by default): pass --no-use-checkpoint-lr-scheduler to use the "
                "flags' schedule on resume");
  if (o.lr_decay_iters) {
    FURLONG_CHECK(*o.lr_decay_iters > 0, "--lr-decay-iters must be > 0, got ", *o.lr_decay_iters);
  } else {
    FURLONG_CHECK(train_iters > 0,
                  "the LR decays over train_iters (num_rollout x "
                  "rollout_batch_size x n_samples_per_prompt / global_batch_size) = ",
                  train_iters, " steps, which must be > 0; set --lr-decay-iters");
  }
  FURLONG_CHECK(o.lr_warmup_iters >= 0, "--lr-warmup-iters must be >= 0, got ", o.lr_warmup_iters);
  FURLONG_CHECK(
      !o.lr_warmup_fraction || (std::isfinite(*o.lr_warmup_fraction) && *o.lr_warmup_fraction >= 0),
      "--lr-warmup-fraction must be >= 0, got ", o.lr_warmup_fraction.value_or(0));
  Schedule s;
  s.max_lr = o.lr;
  s.min_lr = o.min_lr;
  s.init_lr = o.lr_warmup_init;
  s.decay_steps = o.lr_decay_iters.value_or(train_iters);
  s.warmup_steps = o.lr_warmup_fraction ? *o.lr_warmup_fraction * static_cast<double>(s.decay_steps)
                                        : static_cast<double>(o.lr_warmup_iters);
  s.decay_style = o.lr_decay_style;
  if (s.decay_style == LrDecayStyle::kWsd) {
    s.wsd_decay_steps = o.lr_wsd_decay_iters;
    s.wsd_decay_style = o.lr_wsd_decay_style;
  }
  validate(s, "");
  return s;
}

// The checks that hold for any schedule, from flags (`where` empty) or from a checkpoint.
void LrScheduler::validate(const Schedule& s, const std::string& where) {
  FURLONG_CHECK(std::isfinite(s.max_lr) && std::isfinite(s.min_lr) && std::isfinite(s.init_lr),
                "--lr, --min-lr and --lr-warmup-init must be finite", where);
  FURLONG_CHECK(s.min_lr >= 0, "--min-lr must be >= 0, got ", s.min_lr, where);
  FURLONG_CHECK(s.max_lr >= s.min_lr, "--lr (", s.max_lr, ") must be >= --min-lr (", s.min_lr, ")",
                where);
  FURLONG_CHECK(s.init_lr >= 0, "--lr-warmup-init must be >= 0, got ", s.init_lr, where);
  FURLONG_CHECK(s.init_lr <= s.max_lr, "--lr-warmup-init (", s.init_lr, ") must be <= --lr (",
                s.max_lr, ")", where);
  FURLONG_CHECK(s.decay_steps > 0, "--lr-decay-iters must be > 0, got ", s.decay_steps, where);
  FURLONG_CHECK(s.warmup_steps >= 0 && s.warmup_steps < static_cast<double>(s.decay_steps),
                "the warmup (", s.warmup_steps,
                " steps, from --lr-warmup-iters or --lr-warmup-fraction x decay steps) must be "
                "shorter than the decay (",
                s.decay_steps, " steps, from --lr-decay-iters or train_iters)", where);
  if (s.decay_style != LrDecayStyle::kWsd) return;
  FURLONG_CHECK(s.wsd_decay_steps.has_value(),
                "--lr-decay-style WSD needs --lr-wsd-decay-iters (the length of the anneal)",
                where);
  FURLONG_CHECK(*s.wsd_decay_steps > 0 && *s.wsd_decay_steps <= s.decay_steps,
                "--lr-wsd-decay-iters must be in [1, decay steps = ", s.decay_steps, "], got ",
                *s.wsd_decay_steps, where);
  FURLONG_CHECK(s.wsd_decay_style.has_value(), "--lr-decay-style WSD needs --lr-wsd-decay-style (",
                join(lr_wsd_decay_styles()), ")", where);
}

double LrScheduler::lr_at(int64_t step) const {
  FURLONG_ASSERT(step >= 0, "negative scheduler step ", step);
  const Schedule& s = schedule_;
  const double e = static_cast<double>(step);
  if (s.warmup_steps > 0 && e <= s.warmup_steps) {
    return s.init_lr + (s.max_lr - s.init_lr) * e / s.warmup_steps;
  }
  if (s.decay_style == LrDecayStyle::kConstant) return s.max_lr;
  if (step > s.decay_steps) return s.min_lr;
  if (s.decay_style == LrDecayStyle::kInverseSquareRoot) {
    return std::max(s.min_lr, s.max_lr * std::sqrt(std::max(s.warmup_steps, 1.0)) /
                                  std::sqrt(std::max(e, 1.0)));
  }
  return s.min_lr + decay_coeff(step) * (s.max_lr - s.min_lr);
}

// The coefficient in [0, 1] of (max - min) for linear, cosine and WSD, warmup < step <= D.
double LrScheduler::decay_coeff(int64_t step) const {
  const Schedule& s = schedule_;
  const double pi = std::numbers::pi;
  if (s.decay_style == LrDecayStyle::kLinear || s.decay_style == LrDecayStyle::kCosine) {
    double ratio = (static_cast<double>(step) - s.warmup_steps) /
                   (static_cast<double>(s.decay_steps) - s.warmup_steps);
    return s.decay_style == LrDecayStyle::kLinear ? 1.0 - ratio
                                                  : 0.5 * (1.0 + std::cos(pi * ratio));
  }
  FURLONG_ASSERT(s.decay_style == LrDecayStyle::kWsd, "decay style ",
                 lr_decay_style_name(s.decay_style), " has no decay coefficient");
  const int64_t wsd = *s.wsd_decay_steps;
  const int64_t anneal_start = s.decay_steps - wsd;
  if (step <= anneal_start) return 1.0;
  const double r = static_cast<double>(step - anneal_start) / static_cast<double>(wsd);
  switch (*s.wsd_decay_style) {
    case WsdDecayStyle::kLinear:
      return 1.0 - r;
    case WsdDecayStyle::kCosine:
      return 0.5 * (1.0 + std::cos(pi * r));
    case WsdDecayStyle::kExponential:
      return 2.0 * std::pow(0.5, r) - 1.0;
    case WsdDecayStyle::kMinusSqrt:
      break;
  }
  return 1.0 - std::sqrt(r);
}

nlohmann::json LrScheduler::state_dict() const {
  const Schedule& s = schedule_;
  nlohmann::json wsd_steps = nullptr, wsd_style = nullptr;
  if (s.wsd_decay_steps) wsd_steps = *s.wsd_decay_steps;
  if (s.wsd_decay_style) wsd_style = lr_wsd_decay_style_name(*s.wsd_decay_style);
  return {{"step", step_},
          {"max_lr", s.max_lr},
          {"min_lr", s.min_lr},
          {"init_lr", s.init_lr},
          {"warmup_steps", s.warmup_steps},
          {"decay_steps", s.decay_steps},
          {"decay_style", lr_decay_style_name(s.decay_style)},
          {"wsd_decay_steps", wsd_steps},
          {"wsd_decay_style", wsd_style}};
}

LrScheduler::Schedule LrScheduler::from_json(const nlohmann::json& state) {
  const std::string where = " (in the checkpoint's LR scheduler state)";
  Schedule s;
  s.max_lr = field<double>(state, "max_lr");
  s.min_lr = field<double>(state, "min_lr");
  s.init_lr = field<double>(state, "init_lr");
  s.warmup_steps = field<double>(state, "warmup_steps");
  s.decay_steps = field<int64_t>(state, "decay_steps");
  s.decay_style = parse_lr_decay_style(field<std::string>(state, "decay_style"), where);
  s.wsd_decay_steps = optional_field<int64_t>(state, "wsd_decay_steps");
  if (auto style = optional_field<std::string>(state, "wsd_decay_style")) {
    s.wsd_decay_style = parse_lr_wsd_decay_style(*style, where);
  }
  validate(s, where);
  return s;
}

void LrScheduler::load_state_dict(const nlohmann::json& state) {
  auto step = field<int64_t>(state, "step");
  FURLONG_CHECK(step >= 0, "LR scheduler state: step must be >= 0, got ", step);
  Schedule loaded = from_json(state);
  if (!use_checkpoint_ && !override_) {
    // Megatron's rule when neither flag is given: the flags and the checkpoint must agree.
    const Schedule& s = schedule_;
    auto check = [](bool same, const char* flag, const auto& mine, const auto& theirs) {
      FURLONG_CHECK(same, flag, " gives ", mine, " but the checkpoint's LR scheduler has ", theirs,
                    "; pass --override-lr-scheduler to use the flags or "
                    "--use-checkpoint-lr-scheduler to use the checkpoint");
    };
    check(s.max_lr == loaded.max_lr, "--lr", s.max_lr, loaded.max_lr);
    check(s.min_lr == loaded.min_lr, "--min-lr", s.min_lr, loaded.min_lr);
    check(s.init_lr == loaded.init_lr, "--lr-warmup-init", s.init_lr, loaded.init_lr);
    check(s.warmup_steps == loaded.warmup_steps, "--lr-warmup-iters/--lr-warmup-fraction",
          s.warmup_steps, loaded.warmup_steps);
    check(s.decay_steps == loaded.decay_steps, "--lr-decay-iters", s.decay_steps,
          loaded.decay_steps);
    check(s.decay_style == loaded.decay_style, "--lr-decay-style",
          lr_decay_style_name(s.decay_style), lr_decay_style_name(loaded.decay_style));
    check(s.wsd_decay_steps == loaded.wsd_decay_steps, "--lr-wsd-decay-iters",
          s.wsd_decay_steps.value_or(0), loaded.wsd_decay_steps.value_or(0));
    auto wsd_name = [](const std::optional<WsdDecayStyle>& style) {
      return style ? lr_wsd_decay_style_name(*style) : std::string("none");
    };
    check(s.wsd_decay_style == loaded.wsd_decay_style, "--lr-wsd-decay-style",
          wsd_name(s.wsd_decay_style), wsd_name(loaded.wsd_decay_style));
  }
  if (use_checkpoint_) schedule_ = loaded;
  step_ = step;
}

}  // namespace furlong::optim
