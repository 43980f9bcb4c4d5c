// LrScheduler against the spec formulas as transcribed in scripts/oracles/optim_reference.py,
// its validation messages and its checkpoint state.
#include "optim/lr_scheduler.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "optim_oracle.h"

namespace furlong::optim {
namespace {

using furlong::testing::error_of;
using testing::lr_options;

// Both sides evaluate the same formulas term by term in IEEE double with the same libm
// (cos, pow, sqrt), so the schedules must agree exactly, at every step including warmup,
// its last step, the anneal start, the decay end and beyond.
TEST(LrSchedulerOracle, EveryStyleMatchesTheSpecFormulasExactly) {
  std::ifstream in(testing::oracle_dir() / "lr.json");
  auto want = nlohmann::json::parse(in);
  for (const auto& c : testing::lr_cases()) {
    LrScheduler sched(lr_options(c.options), c.train_iters);
    const auto& lrs = want.at(c.name);
    ASSERT_EQ(static_cast<int64_t>(lrs.size()), c.steps) << c.name;
    for (int64_t e = 0; e < c.steps; ++e) {
      EXPECT_EQ(sched.lr_at(e), lrs[e].get<double>()) << c.name << " step " << e;
      EXPECT_EQ(sched.current_lr(), sched.lr_at(e)) << c.name;
      sched.advance();
    }
  }
}

// LrScheduleOptions with `edit` applied to the defaults.
LrScheduleOptions with(const std::function<void(LrScheduleOptions&)>& edit) {
  LrScheduleOptions o;
  edit(o);
  return o;
}

TEST(LrScheduler, ResolvesDecayAndWarmupSteps) {
  auto o = with([](auto& o) {
    o.lr = 1e-5;
    o.lr_decay_style = LrDecayStyle::kLinear;
    o.lr_warmup_iters = 5;
  });
  LrScheduler by_iters(o, 40);
  EXPECT_EQ(by_iters.decay_steps(), 40);  // train_iters when --lr-decay-iters is unset
  EXPECT_EQ(by_iters.warmup_steps(), 5);
  o.lr_decay_iters = 30;
  o.lr_warmup_fraction = 0.25;  // wins over --lr-warmup-iters
  LrScheduler by_fraction(o, 40);
  EXPECT_EQ(by_fraction.decay_steps(), 30);
  EXPECT_EQ(by_fraction.warmup_steps(), 7.5);
  EXPECT_EQ(by_fraction.lr_at(0), 0.0);
  EXPECT_EQ(by_fraction.lr_at(30), 0.0);  // decays to --min-lr at D
}

// Each rule of miles' LR-schedule validation (and furlong's own checks) fails at construction,
// naming the flag.
TEST(LrScheduler, ValidationNamesTheFlag) {
  struct Bad {
    std::function<void(LrScheduleOptions&)> edit;
    int64_t train_iters;
    std::vector<std::string> expect;
  };
  auto wsd = [](LrScheduleOptions& o, std::optional<int64_t> iters,
                std::optional<WsdDecayStyle> style) {
    o.lr_decay_style = LrDecayStyle::kWsd;
    o.lr_wsd_decay_iters = iters;
    o.lr_wsd_decay_style = style;
  };
  const std::vector<Bad> cases = {
      {[](auto& o) { o.min_lr = -1e-6; }, 10, {"--min-lr must be >= 0"}},
      {[](auto& o) { o.min_lr = 1e-5; }, 10, {"--lr (", "must be >= --min-lr"}},
      {[](auto& o) { o.lr_warmup_init = 1e-5; }, 10, {"--lr-warmup-init", "must be <= --lr"}},
      {[](auto& o) { o.lr_warmup_init = -1e-7; }, 10, {"--lr-warmup-init must be >= 0"}},
      {[](auto& o) { o.lr_decay_iters = 0; }, 10, {"--lr-decay-iters must be > 0"}},
      {[](auto&) {}, 0, {"train_iters", "set --lr-decay-iters"}},
      {[](auto& o) { o.lr_warmup_iters = 10; }, 10, {"--lr-warmup-iters", "shorter than"}},
      {[](auto& o) { o.lr_warmup_fraction = 1.0; }, 10, {"--lr-warmup-fraction", "shorter than"}},
      {[](auto& o) { o.lr_warmup_iters = -1; }, 10, {"--lr-warmup-iters must be >= 0"}},
      {[](auto& o) { o.lr_warmup_fraction = -0.1; }, 10, {"--lr-warmup-fraction must be >= 0"}},
      {[&](auto& o) { wsd(o, std::nullopt, WsdDecayStyle::kLinear); },
       10,
       {"needs --lr-wsd-decay-iters"}},
      {[&](auto& o) { wsd(o, 11, WsdDecayStyle::kLinear); },
       10,
       {"--lr-wsd-decay-iters must be in [1, decay steps = 10]"}},
      {[&](auto& o) { wsd(o, 5, std::nullopt); }, 10, {"needs --lr-wsd-decay-style"}},
      {[](auto& o) { o.override_lr_scheduler = true; },
       10,
       {"--override-lr-scheduler and --use-checkpoint-lr-scheduler"}},
  };
  for (const auto& c : cases) {
    auto msg = error_of([&] { LrScheduler s(with(c.edit), c.train_iters); });
    for (const auto& part : c.expect) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  // A WSD anneal may be exactly D long, and overlapping warmup is allowed.
  LrScheduler ok(with([&](auto& o) {
                   wsd(o, 10, WsdDecayStyle::kLinear);
                   o.lr_warmup_iters = 3;
                 }),
                 10);
  EXPECT_EQ(ok.lr_at(10), 0.0);
}

// The styles are parsed once, from the flag or the checkpoint state; a bad spelling names the
// flag and lists the choices.
TEST(LrScheduler, StylesParseFromTheirSpellingsOnly) {
  for (const auto& name : lr_decay_styles()) {
    EXPECT_EQ(lr_decay_style_name(parse_lr_decay_style(name)), name);
  }
  for (const auto& name : lr_wsd_decay_styles()) {
    EXPECT_EQ(lr_wsd_decay_style_name(parse_lr_wsd_decay_style(name)), name);
  }
  EXPECT_EQ(parse_lr_decay_style("inverse-square-root"), LrDecayStyle::kInverseSquareRoot);
  EXPECT_EQ(parse_lr_wsd_decay_style("minus_sqrt"), WsdDecayStyle::kMinusSqrt);
  auto msg = error_of([] { parse_lr_decay_style("exp"); });
  EXPECT_NE(msg.find("--lr-decay-style: invalid choice 'exp' (choose from constant, linear, "
                     "cosine, inverse-square-root, WSD)"),
            std::string::npos)
      << msg;
  msg = error_of([] { parse_lr_wsd_decay_style("sqrt"); });
  EXPECT_NE(msg.find("--lr-wsd-decay-style: invalid choice 'sqrt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("minus_sqrt"), std::string::npos) << msg;
}

const LrScheduleOptions kCosine = with([](auto& o) {
  o.lr = 1e-4;
  o.min_lr = 1e-6;
  o.lr_decay_style = LrDecayStyle::kCosine;
  o.lr_warmup_iters = 3;
});

// The state survives JSON text exactly; the default (--use-checkpoint-lr-scheduler) restores
// the checkpoint's schedule verbatim, as miles does, even when the flags now differ.
TEST(LrSchedulerState, RoundTripAndCheckpointScheduleWins) {
  LrScheduler a(kCosine, 50);
  for (int i = 0; i < 7; ++i) a.advance();
  auto text = a.state_dict().dump();
  LrScheduleOptions other = kCosine;
  other.lr = 5e-4;
  other.lr_decay_style = LrDecayStyle::kLinear;
  LrScheduler b(other, 80);
  b.load_state_dict(nlohmann::json::parse(text));
  EXPECT_EQ(b.step(), 7);
  EXPECT_EQ(b.state_dict(), a.state_dict());
  for (int64_t e = 0; e < 60; ++e) EXPECT_EQ(b.lr_at(e), a.lr_at(e)) << e;
}

// The state spells the styles as the flags do, so checkpoints written before the styles were
// enums load, and new ones read the same.
TEST(LrSchedulerState, StylesAreWrittenAndReadAsTheirSpellings) {
  const auto state = nlohmann::json::parse(R"({"step": 3, "max_lr": 1e-4, "min_lr": 0.0,
      "init_lr": 0.0, "warmup_steps": 0.0, "decay_steps": 20, "decay_style": "WSD",
      "wsd_decay_steps": 5, "wsd_decay_style": "minus_sqrt"})");
  LrScheduler a(kCosine, 50);
  a.load_state_dict(state);
  EXPECT_EQ(a.state_dict(), state);
  EXPECT_EQ(a.lr_at(20), 0.0);
  EXPECT_EQ(LrScheduler(kCosine, 50).state_dict()["decay_style"], "cosine");
  EXPECT_TRUE(LrScheduler(kCosine, 50).state_dict()["wsd_decay_style"].is_null());
}

TEST(LrSchedulerState, OverrideKeepsTheFlagsSchedule) {
  LrScheduler a(kCosine, 50);
  for (int i = 0; i < 4; ++i) a.advance();
  LrScheduleOptions other = kCosine;
  other.lr = 5e-4;
  other.use_checkpoint_lr_scheduler = false;
  other.override_lr_scheduler = true;
  LrScheduler b(other, 50), fresh(other, 50);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.step(), 4);
  EXPECT_EQ(b.current_lr(), fresh.lr_at(4));
}

TEST(LrSchedulerState, WithNeitherFlagTheScheduleMustMatch) {
  LrScheduler a(kCosine, 50);
  a.advance();
  LrScheduleOptions same = kCosine;
  same.use_checkpoint_lr_scheduler = false;
  LrScheduler b(same, 50);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.step(), 1);
  LrScheduleOptions other = same;
  other.min_lr = 2e-6;
  LrScheduler c(other, 50);
  auto msg = error_of([&] { c.load_state_dict(a.state_dict()); });
  EXPECT_NE(msg.find("--min-lr gives 2e-06 but the checkpoint's LR scheduler has 1e-06"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--override-lr-scheduler"), std::string::npos) << msg;
  LrScheduler d(same, 60);  // train_iters changed: D differs
  msg = error_of([&] { d.load_state_dict(a.state_dict()); });
  EXPECT_NE(msg.find("--lr-decay-iters gives 60"), std::string::npos) << msg;
  EXPECT_EQ(c.step(), 0);  // failed loads change nothing
}

TEST(LrSchedulerState, BadStateIsReported) {
  LrScheduler a(kCosine, 50);
  auto state = a.state_dict();
  state.erase("max_lr");
  EXPECT_NE(error_of([&] { a.load_state_dict(state); }).find("missing field 'max_lr'"),
            std::string::npos);
  state = a.state_dict();
  state["decay_steps"] = "fifty";
  EXPECT_NE(error_of([&] { a.load_state_dict(state); }).find("'decay_steps' has the wrong type"),
            std::string::npos);
  state = a.state_dict();
  state["min_lr"] = -1.0;
  auto msg = error_of([&] { a.load_state_dict(state); });
  EXPECT_NE(msg.find("--min-lr must be >= 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in the checkpoint's LR scheduler state"), std::string::npos) << msg;
  state = a.state_dict();
  state["decay_style"] = "exp";
  msg = error_of([&] { a.load_state_dict(state); });
  EXPECT_NE(msg.find("--lr-decay-style: invalid choice 'exp'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in the checkpoint's LR scheduler state"), std::string::npos) << msg;
  state = a.state_dict();
  state["step"] = -3;
  EXPECT_NE(error_of([&] { a.load_state_dict(state); }).find("step must be >= 0"),
            std::string::npos);
}

}  // namespace
}  // namespace furlong::optim
