#include "optim_oracle.h"

#include <ATen/ATen.h>

#include <limits>

#include "common/test_util.h"
#include "core/files.h"

namespace furlong::optim::testing {

const std::vector<AdamWCase>& adamw_cases() {
  // Shapes cover matrices, vectors, a 0-dim parameter and an empty shard (a rank whose slice
  // of a small parameter is empty). Grad scales differ per parameter (1e-2 .. 10) so that eps
  // and the bias corrections matter. In fp32_wd, parameter 2 has no grad at step 0 (its state
  // starts one step late) and parameter 5 never has one (no state at all).
  static const std::vector<AdamWCase> cases = {
      {.name = "fp32_wd",
       .dtype = "float32",
       .shapes = {{33, 17}, {129}, {}, {0, 3}, {5, 4, 3}, {2}},
       .seed = 1,
       .lrs = {1e-3, 2e-3, 1.5e-3, 5e-4, 1e-3, 3e-3},
       .beta1 = 0.9,
       .beta2 = 0.95,
       .eps = 1e-8,
       .weight_decay = 0.1,
       .no_grad = {{0, 2}, {0, 5}, {1, 5}, {2, 5}, {3, 5}, {4, 5}, {5, 5}, {3, 4}}},
      {.name = "fp32_betas",
       .dtype = "float32",
       .shapes = {{64, 64}, {7}},
       .seed = 2,
       .lrs = {1e-2, 1e-2, 1e-2, 1e-2},
       .beta1 = 0.8,
       .beta2 = 0.999,
       .eps = 1e-6,
       .weight_decay = 0.0,
       .no_grad = {}},
      {.name = "fp32_eps",
       .dtype = "float32",
       .shapes = {{31, 9}, {16}, {3, 3}},
       .seed = 3,
       .lrs = {3e-4, 3e-4, 1e-4},
       .beta1 = 0.9,
       .beta2 = 0.98,
       .eps = 1e-3,
       .weight_decay = 0.01,
       .no_grad = {}},
      {.name = "bf16",
       .dtype = "bfloat16",
       .shapes = {{40, 24}, {65}, {3, 3}},
       .seed = 4,
       .lrs = {1e-2, 2e-2, 1e-2, 5e-3},
       .beta1 = 0.9,
       .beta2 = 0.95,
       .eps = 1e-8,
       .weight_decay = 0.1,
       .no_grad = {}},
  };
  return cases;
}

const std::vector<ClipCase>& clip_cases() {
  static const std::vector<ClipCase> cases = {
      {.name = "clip_fp32",
       .dtype = "float32",
       .shapes = {{50, 20}, {300}, {}, {7, 3}},
       .seed = 11,
       .scale = 1.0,
       .max_norm = 1.0,
       .special = ""},
      {.name = "noclip_fp32",
       .dtype = "float32",
       .shapes = {{50, 20}, {300}, {}, {7, 3}},
       .seed = 12,
       .scale = 1e-3,
       .max_norm = 1e9,
       .special = ""},
      {.name = "clip_bf16",
       .dtype = "bfloat16",
       .shapes = {{64, 32}, {100}},
       .seed = 13,
       .scale = 1.0,
       .max_norm = 0.5,
       .special = ""},
      {.name = "inf",
       .dtype = "float32",
       .shapes = {{8, 4}, {5}},
       .seed = 14,
       .scale = 1.0,
       .max_norm = 1.0,
       .special = "inf"},
      {.name = "nan",
       .dtype = "float32",
       .shapes = {{8, 4}, {5}},
       .seed = 15,
       .scale = 1.0,
       .max_norm = 1.0,
       .special = "nan"},
  };
  return cases;
}

const ClipCase& clip_case(const std::string& name) {
  for (const auto& c : clip_cases()) {
    if (c.name == name) return c;
  }
  throw std::runtime_error("no clip case " + name);
}

const std::vector<LrCase>& lr_cases() {
  using J = nlohmann::json;
  auto wsd = [](const char* style) {
    return J{{"lr", 1e-4},
             {"min_lr", 1e-6},
             {"lr_warmup_iters", 5},
             {"lr_decay_iters", 40},
             {"lr_decay_style", "WSD"},
             {"lr_wsd_decay_iters", 12},
             {"lr_wsd_decay_style", style}};
  };
  static const std::vector<LrCase> cases = {
      {"constant_default", J::object(), 10, 15},
      {"constant_warmup", J{{"lr", 1e-5}, {"lr_warmup_iters", 5}, {"lr_warmup_init", 1e-7}}, 30,
       40},
      {"linear",
       J{{"lr", 2e-5},
         {"min_lr", 1e-6},
         {"lr_warmup_iters", 3},
         {"lr_decay_iters", 20},
         {"lr_decay_style", "linear"}},
       50, 30},
      {"linear_min_equals_max", J{{"lr", 1e-5}, {"min_lr", 1e-5}, {"lr_decay_style", "linear"}}, 10,
       14},
      {"linear_fraction_wins",
       J{{"lr", 1e-5},
         {"lr_warmup_iters", 5},
         {"lr_warmup_fraction", 0.0},
         {"lr_decay_style", "linear"}},
       12, 15},
      {"cosine",
       J{{"lr", 1e-4}, {"min_lr", 1e-5}, {"lr_warmup_iters", 10}, {"lr_decay_style", "cosine"}},
       100, 110},
      {"cosine_fraction",
       J{{"lr", 1e-4},
         {"lr_warmup_init", 1e-6},
         {"lr_warmup_fraction", 0.13},
         {"lr_decay_iters", 37},
         {"lr_decay_style", "cosine"}},
       80, 45},
      {"isqrt",
       J{{"lr", 3e-4},
         {"min_lr", 1e-5},
         {"lr_warmup_iters", 4},
         {"lr_decay_iters", 50},
         {"lr_decay_style", "inverse-square-root"}},
       50, 60},
      {"isqrt_no_warmup",
       J{{"lr", 3e-4}, {"lr_decay_iters", 50}, {"lr_decay_style", "inverse-square-root"}}, 50, 60},
      {"wsd_linear", wsd("linear"), 40, 45},
      {"wsd_cosine", wsd("cosine"), 40, 45},
      {"wsd_exponential", wsd("exponential"), 40, 45},
      {"wsd_minus_sqrt", wsd("minus_sqrt"), 40, 45},
      {"wsd_fraction_whole_decay",
       J{{"lr", 2e-5},
         {"min_lr", 2e-6},
         {"lr_warmup_fraction", 0.1},
         {"lr_decay_style", "WSD"},
         {"lr_wsd_decay_iters", 25},
         {"lr_wsd_decay_style", "cosine"}},
       25, 30},
  };
  return cases;
}

LrScheduleOptions lr_options(const nlohmann::json& j) {
  LrScheduleOptions o;
  o.lr = j.value("lr", o.lr);
  o.min_lr = j.value("min_lr", o.min_lr);
  o.lr_warmup_init = j.value("lr_warmup_init", o.lr_warmup_init);
  if (j.contains("lr_decay_style")) {
    o.lr_decay_style = parse_lr_decay_style(j["lr_decay_style"].get<std::string>());
  }
  o.lr_warmup_iters = j.value("lr_warmup_iters", o.lr_warmup_iters);
  if (j.contains("lr_decay_iters")) o.lr_decay_iters = j["lr_decay_iters"].get<int64_t>();
  if (j.contains("lr_warmup_fraction"))
    o.lr_warmup_fraction = j["lr_warmup_fraction"].get<double>();
  if (j.contains("lr_wsd_decay_iters"))
    o.lr_wsd_decay_iters = j["lr_wsd_decay_iters"].get<int64_t>();
  if (j.contains("lr_wsd_decay_style")) {
    o.lr_wsd_decay_style = parse_lr_wsd_decay_style(j["lr_wsd_decay_style"].get<std::string>());
  }
  return o;
}

namespace {

// Every field spelled out (nulls for unset optionals), so the Python reference sees the same
// defaults as the C++ without knowing them.
nlohmann::json full_lr_options(const nlohmann::json& j) {
  auto o = lr_options(j);
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json wsd_style = nullptr;
  if (o.lr_wsd_decay_style) wsd_style = lr_wsd_decay_style_name(*o.lr_wsd_decay_style);
  return {{"lr", o.lr},
          {"min_lr", o.min_lr},
          {"lr_warmup_init", o.lr_warmup_init},
          {"lr_decay_style", lr_decay_style_name(o.lr_decay_style)},
          {"lr_warmup_iters", o.lr_warmup_iters},
          {"lr_decay_iters", opt(o.lr_decay_iters)},
          {"lr_warmup_fraction", opt(o.lr_warmup_fraction)},
          {"lr_wsd_decay_iters", opt(o.lr_wsd_decay_iters)},
          {"lr_wsd_decay_style", wsd_style}};
}

nlohmann::json plan() {
  nlohmann::json adamw = nlohmann::json::array(), clip = nlohmann::json::array(),
                 lr = nlohmann::json::array();
  for (const auto& c : adamw_cases()) {
    nlohmann::json no_grad = nlohmann::json::array();
    for (auto [s, i] : c.no_grad) no_grad.push_back({s, i});
    adamw.push_back({{"name", c.name},
                     {"dtype", c.dtype},
                     {"shapes", c.shapes},
                     {"seed", c.seed},
                     {"lrs", c.lrs},
                     {"beta1", c.beta1},
                     {"beta2", c.beta2},
                     {"eps", c.eps},
                     {"weight_decay", c.weight_decay},
                     {"no_grad", no_grad}});
  }
  for (const auto& c : clip_cases()) {
    clip.push_back({{"name", c.name},
                    {"dtype", c.dtype},
                    {"shapes", c.shapes},
                    {"seed", c.seed},
                    {"scale", c.scale},
                    {"max_norm", c.max_norm},
                    {"special", c.special}});
  }
  for (const auto& c : lr_cases()) {
    lr.push_back({{"name", c.name},
                  {"options", full_lr_options(c.options)},
                  {"train_iters", c.train_iters},
                  {"steps", c.steps}});
  }
  return {{"adamw", adamw}, {"clip", clip}, {"lr", lr}};
}

}  // namespace

const std::filesystem::path& oracle_dir() {
  static const std::filesystem::path dir = [] {
    auto p = plan();
    return furlong::testing::cached_oracle(
        "optim", "oracles/optim_reference.py", p.dump(), [&](const auto& dir) {
          write_file_atomic(dir / "plan.json", p.dump());
          return std::vector<std::string>{(dir / "plan.json").string(), dir.string()};
        });
  }();
  return dir;
}

std::shared_ptr<io::SafetensorsFile> oracle_file(const std::string& name) {
  return io::SafetensorsFile::open(oracle_dir() / (name + ".safetensors"));
}

at::Tensor oracle_tensor(const io::SafetensorsFile& file, const std::string& name) {
  return file.tensor(name).clone();
}

int64_t max_ulp_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  EXPECT_EQ(a.scalar_type(), b.scalar_type());
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
    return std::numeric_limits<int64_t>::max();
  }
  if (a.numel() == 0) return 0;
  if (!at::equal(a.isnan(), b.isnan())) return std::numeric_limits<int64_t>::max();
  const bool is32 = a.scalar_type() == at::kFloat;
  EXPECT_TRUE(is32 || a.scalar_type() == at::kBFloat16) << a.scalar_type();
  const int64_t magnitude_mask = is32 ? 0x7fffffff : 0x7fff;
  // Sign-magnitude bits -> a monotone integer line on which adjacent floats differ by 1.
  auto ordered = [&](const at::Tensor& t) {
    auto bits = t.contiguous().view(is32 ? at::kInt : at::kShort).to(at::kLong);
    auto magnitude = at::bitwise_and(bits, magnitude_mask);
    return at::where(bits < 0, -magnitude, magnitude);
  };
  auto finite = at::logical_not(a.isnan());
  auto diff = (ordered(a) - ordered(b)).abs().masked_select(finite);
  return diff.numel() == 0 ? 0 : diff.max().item<int64_t>();
}

double max_eps_diff(const at::Tensor& a, const at::Tensor& b, double floor) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  if (a.numel() == 0) return 0;
  const double eps = a.scalar_type() == at::kBFloat16 ? 0x1p-7 : 0x1p-23;
  auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  auto scale = b64.abs().clamp_min(floor) * eps;
  return ((a64 - b64).abs() / scale).max().item<double>();
}

}  // namespace furlong::optim::testing
