// AdamW against torch.optim.AdamW (scripts/oracles/optim_reference.py), its state dict, device
// moves and error messages.
#include "optim/adamw.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>

#include "common/test_util.h"
#include "io/safetensors.h"
#include "optim/clip_grad.h"
#include "optim_oracle.h"

namespace furlong::optim {
namespace {

using furlong::testing::error_of;
using testing::AdamWCase;
using testing::max_eps_diff;
using testing::max_ulp_diff;
using testing::oracle_tensor;

struct Impl {
  AdamWImpl impl;
  const char* torch_name;  // the oracle's name for the matching torch.optim.AdamW flag
};
constexpr Impl kImpls[] = {{AdamWImpl::kFused, "fused"},
                           {AdamWImpl::kForeach, "foreach"},
                           {AdamWImpl::kForLoop, "forloop"}};

struct Run {
  std::vector<at::Tensor> params;
  std::unique_ptr<AdamW> opt;
};

// furlong's AdamW over the oracle's inputs for `c`: same initial values, grads and LRs.
Run run_case(const AdamWCase& c, const io::SafetensorsFile& f, AdamWImpl impl) {
  Run r;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    r.params.push_back(oracle_tensor(f, "init." + std::to_string(i)).requires_grad_(true));
  }
  r.opt = std::make_unique<AdamW>(r.params, AdamWOptions{.lr = c.lrs[0],
                                                         .beta1 = c.beta1,
                                                         .beta2 = c.beta2,
                                                         .eps = c.eps,
                                                         .weight_decay = c.weight_decay,
                                                         .impl = impl});
  for (size_t s = 0; s < c.lrs.size(); ++s) {
    for (size_t i = 0; i < r.params.size(); ++i) {
      auto key = "grad." + std::to_string(s) + "." + std::to_string(i);
      r.params[i].mutable_grad() = f.find(key) ? oracle_tensor(f, key) : at::Tensor();
    }
    r.opt->options().lr = c.lrs[s];
    r.opt->step();
  }
  return r;
}

std::map<std::string, at::Tensor> as_map(const StateTensors& state) {
  return {state.begin(), state.end()};
}

// Largest ulp distance between furlong's run and torch's `torch_impl` over parameters and
// moments; steps and the set of parameters holding state must match exactly.
int64_t ulp_vs_torch(const AdamWCase& c, const Run& r, const io::SafetensorsFile& f,
                     const std::string& torch_impl) {
  int64_t worst = 0;
  auto state = as_map(r.opt->state_dict());
  for (size_t i = 0; i < r.params.size(); ++i) {
    auto idx = std::to_string(i);
    auto ref = [&](const std::string& what) {
      return oracle_tensor(f, torch_impl + "." + what + "." + idx);
    };
    worst = std::max(worst, max_ulp_diff(r.params[i].detach(), ref("param")));
    bool has_state = f.find(torch_impl + ".step." + idx) != nullptr;
    EXPECT_EQ(state.count(idx + ".step"), has_state ? 1u : 0u) << c.name << " param " << i;
    if (!has_state || !state.count(idx + ".step")) continue;
    EXPECT_EQ(state[idx + ".step"].item<float>(), ref("step").item<float>()) << c.name;
    EXPECT_EQ(r.opt->steps_taken(i), ref("step").item<int64_t>()) << c.name;
    worst = std::max(worst, max_ulp_diff(state[idx + ".exp_avg"], ref("exp_avg")));
    worst = std::max(worst, max_ulp_diff(state[idx + ".exp_avg_sq"], ref("exp_avg_sq")));
  }
  return worst;
}

// Each implementation runs the same ATen kernels in the same order with the same double
// scalars as its PyTorch counterpart, so anything but bit-identity is a bug.
TEST(AdamWOracle, EachImplIsBitIdenticalToItsPyTorchCounterpart) {
  for (const auto& c : testing::adamw_cases()) {
    auto f = testing::oracle_file("adamw_" + c.name);
    for (const auto& impl : kImpls) {
      auto r = run_case(c, *f, impl.impl);
      EXPECT_EQ(ulp_vs_torch(c, r, *f, impl.torch_name), 0) << c.name << " " << impl.torch_name;
    }
  }
}

struct Drift {
  double param_eps = 0;    // parameters, in roundings at scale max(|p|, max lr)
  int64_t moment_ulp = 0;  // exp_avg and exp_avg_sq, in ulp
};

// How far furlong's run is from torch's CPU default (the for-loop) when the implementations
// differ. A parameter's difference comes from rounding inside the update, whose size is about
// lr, plus p's own final rounding: hence the floor max(lr) in the parameter metric.
Drift drift_vs_torch_default(const AdamWCase& c, const Run& r, const io::SafetensorsFile& f) {
  Drift d;
  double max_lr = *std::max_element(c.lrs.begin(), c.lrs.end());
  auto state = as_map(r.opt->state_dict());
  for (size_t i = 0; i < r.params.size(); ++i) {
    auto idx = std::to_string(i);
    auto ref = [&](const std::string& what) {
      return oracle_tensor(f, "forloop." + what + "." + idx);
    };
    d.param_eps = std::max(d.param_eps, max_eps_diff(r.params[i].detach(), ref("param"), max_lr));
    if (!state.count(idx + ".step")) continue;
    d.moment_ulp = std::max(d.moment_ulp, max_ulp_diff(state[idx + ".exp_avg"], ref("exp_avg")));
    d.moment_ulp =
        std::max(d.moment_ulp, max_ulp_diff(state[idx + ".exp_avg_sq"], ref("exp_avg_sq")));
  }
  std::printf("%s: parameters within %.2f roundings, moments within %ld ulp\n", c.name.c_str(),
              d.param_eps, static_cast<long>(d.moment_ulp));
  return d;
}

// Across implementations (furlong's fused/foreach vs torch's CPU default) the op order
// differs: fused evaluates each element in one expression in fp32 registers, the others
// round after every op. Measured over these 3-6 steps: parameters within 1.6 roundings,
// moments within 1 ulp (furlong's foreach equals torch's for-loop exactly on CPU). Bounds:
// 4 of each, slack for a few more roundings; a missing bias correction or weight decay moves
// results by thousands. (Subtler slips are the bit-identity test's job.) These are regression
// limits, not derived bounds: counting roundings (~14 per element and step, S steps, both sides)
// gives lambda sqrt(28 S) / 2 ~ 40 roundings, which would hide real slips. They do not depend on
// the CPU: AdamW is elementwise (no reductions, so no lane counts, blockings or thread splits),
// +, -, *, / and sqrt are correctly rounded in every ATen code path, and the only CPU-dependent
// difference is FMA contraction in furlong's x86-64-v3/v4 clones (one rounding fewer per
// contraction, within the count).
TEST(AdamWOracle, Fp32ImplsMatchPyTorchDefaultWithinAFewRoundings) {
  for (const auto& c : testing::adamw_cases()) {
    if (c.dtype != "float32") continue;
    auto f = testing::oracle_file("adamw_" + c.name);
    for (auto impl : {AdamWImpl::kFused, AdamWImpl::kForeach}) {
      auto d = drift_vs_torch_default(c, run_case(c, *f, impl), *f);
      EXPECT_LE(d.param_eps, 4) << c.name;
      EXPECT_LE(d.moment_ulp, 4) << c.name;
    }
  }
}

// bf16 parameters keep bf16 state, as torch does. Fused computes each element in fp32 and
// rounds once; the for-loop rounds to bf16 after every op (about six roundings per step).
// Measured over 4 steps: parameters within 2.8 bf16 roundings (eps 2^-7, scale max(|p|, lr)),
// moments within 2 ulp. Bounds: 8 and 4; a dropped bias correction or weight decay is far
// outside them (bias correction alone is a factor 10 on the first step).
TEST(AdamWOracle, Bf16ParamsKeepBf16StateAndTrackPyTorchDefault) {
  const auto& c = testing::adamw_cases().back();
  ASSERT_EQ(c.dtype, "bfloat16");
  auto f = testing::oracle_file("adamw_" + c.name);
  auto r = run_case(c, *f, AdamWImpl::kFused);
  for (const auto& [name, t] : r.opt->state_dict()) {
    auto want = name.ends_with(".step") ? at::kFloat : at::kBFloat16;
    EXPECT_EQ(t.scalar_type(), want) << name;
  }
  auto d = drift_vs_torch_default(c, r, *f);
  EXPECT_LE(d.param_eps, 8);
  EXPECT_LE(d.moment_ulp, 4);
}

// ---- state dict, devices, errors (no oracle) ----

std::vector<at::Tensor> make_params(int64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {at::randn({6, 5}, gen).requires_grad_(true), at::randn({11}, gen).requires_grad_(true),
          at::randn({3}, gen).requires_grad_(true)};
}

// Deterministic grads for step `s`; parameter 2 gets none (it never gets state).
void set_grads(std::vector<at::Tensor>& params, int64_t s) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + s);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = i == 2 ? at::Tensor() : at::randn(params[i].sizes(), gen);
  }
}

std::vector<at::Tensor> clone_all(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone().requires_grad_(true));
  return out;
}

void expect_identical(const StateTensors& a, const StateTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(at::equal(a[i].second.cpu(), b[i].second.cpu())) << a[i].first;
    EXPECT_EQ(a[i].second.scalar_type(), b[i].second.scalar_type()) << a[i].first;
  }
}

const AdamWOptions kOpts{.lr = 1e-2,
                         .beta1 = 0.9,
                         .beta2 = 0.95,
                         .eps = 1e-8,
                         .weight_decay = 0.1,
                         .impl = AdamWImpl::kFused};

// The optimizer on shards (a 1-element, a 332-element and a 670-element slice of one
// parameter) against the same optimizer on the whole parameter: for-loop and foreach give the
// same bits; fused may differ by 1 ulp on a tensor's scalar tail (see adamw.h).
TEST(AdamW, ShardedUpdateMatchesUnsharded) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto init = at::randn({1002}, gen);
  std::vector<at::Tensor> grads;
  for (int s = 0; s < 4; ++s) grads.push_back(at::randn({1002}, gen) * 0.01);
  const std::vector<int64_t> cuts = {0, 1, 333, 1002};
  for (const auto& impl : kImpls) {
    AdamWOptions opts = kOpts;
    opts.impl = impl.impl;
    std::vector<at::Tensor> whole{init.clone().requires_grad_(true)}, shards;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      shards.push_back(init.slice(0, cuts[k], cuts[k + 1]).clone().requires_grad_(true));
    }
    AdamW a(whole, opts), b(shards, opts);
    for (const auto& g : grads) {
      whole[0].mutable_grad() = g.clone();
      for (size_t k = 0; k < shards.size(); ++k) {
        shards[k].mutable_grad() = g.slice(0, cuts[k], cuts[k + 1]).clone();
      }
      a.step();
      b.step();
    }
    auto joined = at::cat(shards).detach();
    EXPECT_LE(max_ulp_diff(joined, whole[0].detach()), impl.impl == AdamWImpl::kFused ? 1 : 0)
        << impl.torch_name;
  }
}

// Save after 3 steps (through a safetensors file, as a checkpoint does), load into a fresh
// optimizer over copies of the parameters, take 2 more steps on both: bit-identical.
TEST(AdamWState, RoundTripThroughSafetensorsContinuesBitIdentically) {
  for (const auto& impl : kImpls) {
    auto a_params = make_params(1);
    AdamWOptions opts = kOpts;
    opts.impl = impl.impl;
    AdamW a(a_params, opts);
    for (int s = 0; s < 3; ++s) set_grads(a_params, s), a.step();
    auto saved = a.state_dict();
    std::vector<std::string> keys;
    for (const auto& [k, t] : saved) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"0.exp_avg", "0.exp_avg_sq", "0.step", "1.exp_avg",
                                              "1.exp_avg_sq", "1.step"}));
    auto path = furlong::testing::scratch_dir() / "optim.safetensors";
    io::save_safetensors(path, saved);
    auto file = io::SafetensorsFile::open(path);
    StateTensors loaded;
    for (const auto& info : file->tensors())
      loaded.emplace_back(info.name, file->tensor(info.name));

    auto b_params = clone_all(a_params);
    AdamW b(b_params, opts);
    b.load_state_dict(loaded);  // copies: the mmap'd views are read-only
    expect_identical(a.state_dict(), b.state_dict());
    for (int s = 3; s < 5; ++s) {
      set_grads(a_params, s), a.step();
      set_grads(b_params, s), b.step();
    }
    expect_identical(a.state_dict(), b.state_dict());
    for (size_t i = 0; i < a_params.size(); ++i) {
      EXPECT_TRUE(at::equal(a_params[i], b_params[i])) << impl.torch_name << " param " << i;
    }
    EXPECT_EQ(b.steps_taken(0), 5);
    EXPECT_EQ(b.steps_taken(2), 0);
  }
}

TEST(AdamWState, LoadCastsMomentsToTheParameterDtype) {
  auto params = make_params(2);
  AdamW a(params, kOpts);
  set_grads(params, 0);
  a.step();
  std::vector<at::Tensor> bf16;
  for (const auto& p : params) bf16.push_back(p.detach().to(at::kBFloat16));
  AdamW b(bf16, kOpts);
  b.load_state_dict(a.state_dict());
  for (const auto& [name, t] : b.state_dict()) {
    EXPECT_EQ(t.scalar_type(), name.ends_with(".step") ? at::kFloat : at::kBFloat16) << name;
  }
}

TEST(AdamWState, LoadValidatesBeforeChangingAnything) {
  auto params = make_params(3);
  AdamW opt(params, kOpts);
  set_grads(params, 0);
  opt.step();
  const auto good = opt.state_dict();
  auto with = [&](const std::string& key, at::Tensor t) {
    StateTensors s;
    for (const auto& [k, v] : good) s.emplace_back(k, k == key ? t : v);
    if (std::none_of(good.begin(), good.end(), [&](const auto& kv) { return kv.first == key; })) {
      s.emplace_back(key, t);
    }
    return s;
  };
  auto without = [&](const std::string& key) {
    StateTensors s;
    for (const auto& kv : good) {
      if (kv.first != key) s.push_back(kv);
    }
    return s;
  };
  auto msg = error_of([&] { opt.load_state_dict(with("0.exp_avg", at::zeros({5, 6}))); });
  EXPECT_NE(msg.find("0.exp_avg has shape [5, 6]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[6, 5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("resharded"), std::string::npos) << msg;
  msg = error_of([&] { opt.load_state_dict(with("0.momentum", at::zeros({6, 5}))); });
  EXPECT_NE(msg.find("unknown field 'momentum'"), std::string::npos) << msg;
  msg = error_of([&] { opt.load_state_dict(with("7.step", at::ones({}))); });
  EXPECT_NE(msg.find("names parameter 7 but this optimizer has 3"), std::string::npos) << msg;
  msg = error_of([&] { opt.load_state_dict(with("exp_avg", at::ones({}))); });
  EXPECT_NE(msg.find("not of the form"), std::string::npos) << msg;
  msg = error_of([&] { opt.load_state_dict(without("1.exp_avg_sq")); });
  EXPECT_NE(msg.find("lacks '1.exp_avg_sq'"), std::string::npos) << msg;
  msg = error_of([&] { opt.load_state_dict(with("1.step", at::full({}, 1.5))); });
  EXPECT_NE(msg.find("1.step is 1.5"), std::string::npos) << msg;
  msg = error_of([&] { opt.load_state_dict(with("1.step", at::full({}, -1.0))); });
  EXPECT_NE(msg.find("non-negative whole number"), std::string::npos) << msg;
  msg = error_of([&] { opt.load_state_dict(with("1.exp_avg", at::zeros({11}, at::kInt))); });
  EXPECT_NE(msg.find("floating-point"), std::string::npos) << msg;
  expect_identical(opt.state_dict(), good);  // every failed load left the state alone
}

TEST(AdamW, SkipsParametersWithoutGradAndZeroGradClearsGrads) {
  auto params = make_params(4);
  auto before = params[2].detach().clone();
  AdamW opt(params, kOpts);
  set_grads(params, 0);
  opt.step();
  EXPECT_TRUE(at::equal(params[2], before));  // no grad: not even weight decay
  EXPECT_EQ(opt.steps_taken(2), 0);
  opt.zero_grad();
  for (const auto& p : params) EXPECT_FALSE(p.grad().defined());
  opt.step();  // nothing has a grad: a no-op
  EXPECT_EQ(opt.steps_taken(0), 1);
}

// Moving state away and back is exact; a state/parameter device mismatch is reported.
TEST(AdamW, ToDeviceMovesStateAndReportsMismatches) {
  auto params = make_params(5);
  AdamW opt(params, kOpts);
  set_grads(params, 0);
  opt.step();
  const auto before = opt.state_dict();
  opt.to(c10::kCPU);
  expect_identical(opt.state_dict(), before);
  opt.to(c10::Device(c10::kMeta));
  EXPECT_EQ(opt.state_dict()[0].second.device().type(), c10::kMeta);
  auto msg = error_of([&] { opt.step(); });
  EXPECT_NE(msg.find("call AdamW::to()"), std::string::npos) << msg;
}

TEST(AdamW, CudaRoundTripIsBitIdentical) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  for (const auto& impl : kImpls) {
    auto params = make_params(5);
    AdamWOptions opts = kOpts;
    opts.impl = impl.impl;
    AdamW opt(params, opts);
    set_grads(params, 0);
    opt.step();
    std::vector<at::Tensor> copies;
    for (const auto& [k, t] : opt.state_dict()) copies.push_back(t.clone());
    opt.to(c10::Device(c10::kCUDA, 0));
    EXPECT_TRUE(opt.state_dict()[0].second.is_cuda());
    opt.to(c10::kCPU, /*pin_memory=*/true);
    auto after = opt.state_dict();
    EXPECT_TRUE(after[0].second.is_pinned());
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_TRUE(at::equal(after[i].second, copies[i])) << after[i].first;
    }
  }
}

TEST(AdamW, ErrorsNameTheFlagOrParameter) {
  auto params = make_params(6);
  auto bad = [&](const std::function<void(AdamWOptions&)>& edit) {
    AdamWOptions o;
    edit(o);
    return error_of([&] { AdamW opt(params, o); });
  };
  EXPECT_NE(bad([](auto& o) { o.lr = -1; }).find("--lr"), std::string::npos);
  EXPECT_NE(bad([](auto& o) { o.beta1 = 1.0; }).find("--adam-beta1"), std::string::npos);
  EXPECT_NE(bad([](auto& o) { o.beta2 = -0.1; }).find("--adam-beta2"), std::string::npos);
  EXPECT_NE(bad([](auto& o) { o.eps = -1e-8; }).find("--adam-eps"), std::string::npos);
  EXPECT_NE(bad([](auto& o) { o.weight_decay = -0.1; }).find("--weight-decay"), std::string::npos);

  AdamW opt(params, kOpts);
  opt.options().lr = std::nan("");  // what a broken schedule would set
  set_grads(params, 0);
  EXPECT_NE(error_of([&] { opt.step(); }).find("--lr"), std::string::npos);
  opt.options().lr = 1e-3;
  params[0].mutable_grad() = at::zeros({5, 6});
  auto msg = error_of([&] { opt.step(); });
  EXPECT_NE(msg.find("parameter 0 is Float[6, 5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("grad is Float[5, 6]"), std::string::npos) << msg;

  // Fused needs contiguous tensors (PyTorch's CPU kernel silently mismatches elements).
  auto transposed = at::randn({4, 6}).t().requires_grad_(true);
  transposed.mutable_grad() = at::randn({6, 4});
  AdamW fused({transposed}, kOpts);
  msg = error_of([&] { fused.step(); });
  EXPECT_NE(msg.find("not contiguous"), std::string::npos) << msg;
  AdamWOptions loop_opts = kOpts;
  loop_opts.impl = AdamWImpl::kForLoop;
  AdamW loop({transposed}, loop_opts);
  loop.step();
  EXPECT_EQ(loop.steps_taken(0), 1);

  check_optimizer_name("adam");
  msg = error_of([] { check_optimizer_name("sgd"); });
  EXPECT_NE(msg.find("--optimizer 'sgd' is not supported"), std::string::npos) << msg;

  msg = error_of([&] { AdamW dup({params[0], params[1], params[0]}, kOpts); });
  EXPECT_NE(msg.find("parameter 2 is listed twice"), std::string::npos) << msg;
  msg = error_of([&] { AdamW ints({at::zeros({2}, at::kLong)}, kOpts); });
  EXPECT_NE(msg.find("floating-point"), std::string::npos) << msg;
}

// Median wall time of `fn` over 7 runs, in ms.
double median_ms(const std::function<void()>& fn) {
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Not a unit test: step() and clip_grad_norm cost for 200 tensors totalling 10M fp32 elements.
// Run with --gtest_also_run_disabled_tests --gtest_filter='*StepCost*'.
TEST(AdamWPerf, DISABLED_StepCost) {
  std::vector<at::Tensor> params;
  for (int i = 0; i < 200; ++i) {
    params.push_back(at::randn({50000}).requires_grad_(true));
    params.back().mutable_grad() = at::randn({50000});
  }
  for (const auto& impl : kImpls) {
    AdamWOptions opts = kOpts;
    opts.impl = impl.impl;
    AdamW opt(params, opts);
    opt.step();  // creates the state
    std::printf("AdamW %-8s step: median %.2f ms\n", impl.torch_name,
                median_ms([&] { opt.step(); }));
  }
  std::printf("clip_grad_norm (no clipping): median %.2f ms\n",
              median_ms([&] { clip_grad_norm(params, 1e30, {}); }));
  double norm = clip_grad_norm(params, 0, {});  // each run below scales by ~0.9999
  std::printf("clip_grad_norm (clipping): median %.2f ms\n",
              median_ms([&] { norm = clip_grad_norm(params, 0.9999 * norm, {}); }));
}

}  // namespace
}  // namespace furlong::optim
