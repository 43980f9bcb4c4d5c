// The learning-rate schedule of miles' FSDP backend (FSDPLRScheduler, Megatron's formulas):
// linear warmup from --lr-warmup-init to --lr, then constant / linear / cosine /
// inverse-square-root / WSD (warmup-stable-decay with a linear, cosine, exponential or
// minus_sqrt anneal) down to --min-lr over the decay steps.
//
// Steps: the scheduler starts at step 0 and advance() is called once after every optimizer
// step, so optimizer step k (0-based) uses lr_at(k), and the LR miles logs after a step
// (lr-pg_0, read after scheduler.step()) is current_lr() after advance().
//
// Decay steps D = --lr-decay-iters, or train_iters when unset. Warmup steps Wu =
// --lr-warmup-fraction x D when set (it wins; may be fractional), else --lr-warmup-iters.
// lr_at(e):
//   Wu > 0 and e <= Wu        init + (max - init) * e / Wu
//   constant                  max
//   e > D                     min
//   inverse-square-root       max(min, max * sqrt(max(Wu, 1)) / sqrt(max(e, 1)))
//   otherwise                 min + coeff * (max - min), ratio = (e - Wu) / (D - Wu):
//     linear  1 - ratio;   cosine  0.5 * (1 + cos(pi * ratio));
//     WSD     1 while e <= D - W (W = --lr-wsd-decay-iters), then with r = (e - (D - W)) / W:
//             linear 1 - r, cosine 0.5 * (1 + cos(pi * r)), exponential 2 * 0.5^r - 1,
//             minus_sqrt 1 - sqrt(r).
//
// Validation happens at construction, with errors naming flags. Beyond miles' asserts (min_lr
// >= 0, lr >= min_lr, init <= lr, D > 0, Wu < D, WSD needs its decay iters, not both override
// and use-checkpoint), furlong also rejects at construction what miles would only fail on
// later or silently misuse: a WSD run without --lr-wsd-decay-style (miles crashes when the
// anneal starts), negative warmup or warmup init, and a WSD anneal longer than D. An unknown
// decay style (miles raises when the first decayed LR is computed) is refused earlier still,
// where the flag or the checkpoint state is parsed.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace furlong::optim {

// --lr-decay-style and --lr-wsd-decay-style; the spellings are miles' (lr_decay_styles()).
enum class LrDecayStyle { kConstant, kLinear, kCosine, kInverseSquareRoot, kWsd };
enum class WsdDecayStyle { kLinear, kCosine, kExponential, kMinusSqrt };

// The spellings, in the enums' order (the flag table's choices, the checkpoint's strings).
const std::vector<std::string>& lr_decay_styles();
const std::vector<std::string>& lr_wsd_decay_styles();
// A spelling as its value; anything else is an error naming the flag and listing the choices,
// followed by `where` (e.g. that the value came from a checkpoint).
LrDecayStyle parse_lr_decay_style(const std::string& name, const std::string& where = "");
WsdDecayStyle parse_lr_wsd_decay_style(const std::string& name, const std::string& where = "");
const std::string& lr_decay_style_name(LrDecayStyle style);
const std::string& lr_wsd_decay_style_name(WsdDecayStyle style);

// The flags of the miles FSDP backend that shape the LR (same names, same defaults).
struct LrScheduleOptions {
  double lr = 1e-6;                                       // --lr: the peak LR
  double min_lr = 0.0;                                    // --min-lr
  double lr_warmup_init = 0.0;                            // --lr-warmup-init
  LrDecayStyle lr_decay_style = LrDecayStyle::kConstant;  // --lr-decay-style
  std::optional<int64_t> lr_decay_iters;                  // --lr-decay-iters (unset: train_iters)
  int64_t lr_warmup_iters = 0;                            // --lr-warmup-iters
  std::optional<double> lr_warmup_fraction;               // --lr-warmup-fraction
  std::optional<int64_t> lr_wsd_decay_iters;              // --lr-wsd-decay-iters
  std::optional<WsdDecayStyle> lr_wsd_decay_style;        // --lr-wsd-decay-style
  bool use_checkpoint_lr_scheduler = true;                // --[no-]use-checkpoint-lr-scheduler
  bool override_lr_scheduler = false;                     // --[no-]override-lr-scheduler
};

class LrScheduler {
 public:
  // `train_iters`: the run's optimizer steps (num_rollout * rollout_batch_size *
  // n_samples_per_prompt / global_batch_size), used when --lr-decay-iters is unset.
  LrScheduler(const LrScheduleOptions& options, int64_t train_iters);

  double lr_at(int64_t step) const;
  int64_t step() const { return step_; }
  double current_lr() const { return lr_at(step_); }
  // After each optimizer step.
  void advance() { ++step_; }

  // The resolved schedule (D and Wu above; the trainer reports D as lr_decay_iters).
  int64_t decay_steps() const { return schedule_.decay_steps; }
  double warmup_steps() const { return schedule_.warmup_steps; }

  // Checkpoint state: {"step", "max_lr", "min_lr", "init_lr", "warmup_steps", "decay_steps",
  // "decay_style", "wsd_decay_steps", "wsd_decay_style"} (the last two null unless WSD).
  nlohmann::json state_dict() const;
  // Restores the step. The schedule comes from the checkpoint when
  // --use-checkpoint-lr-scheduler (the default; miles restores it verbatim), stays as the
  // flags say with --override-lr-scheduler, and must match the flags when both are off
  // (Megatron's rule; an error names the differing flag). Validated before anything changes.
  void load_state_dict(const nlohmann::json& state);

 private:
  // The resolved, validated schedule.
  struct Schedule {
    double max_lr = 0, min_lr = 0, init_lr = 0;
    double warmup_steps = 0;
    int64_t decay_steps = 0;
    LrDecayStyle decay_style = LrDecayStyle::kConstant;
    std::optional<int64_t> wsd_decay_steps;
    std::optional<WsdDecayStyle> wsd_decay_style;
  };
  static Schedule resolve(const LrScheduleOptions& options, int64_t train_iters);
  static void validate(const Schedule& s, const std::string& where);
  static Schedule from_json(const nlohmann::json& state);
  double decay_coeff(int64_t step) const;

  Schedule schedule_;
  bool use_checkpoint_ = true;
  bool override_ = false;
  int64_t step_ = 0;
};

}  // namespace furlong::optim
