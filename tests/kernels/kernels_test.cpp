// Fused CPU kernels against their ATen references (the op-for-op transformers formulas), forward
// and backward, fp32 and bf16, plus throughput against the unfused ATen chains (printed).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>

#include "common/test_util.h"
#include "kernels/cpu_kernels.h"
#include "kernels/fused_ops.h"
#include "kernels/vec_math.h"

namespace furlong::kernels {
namespace {

using testing::max_abs_diff;

at::Tensor ref_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  auto x32 = x.to(at::kFloat);
  auto normed = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps);
  return w * normed.to(x.scalar_type());
}

at::Tensor ref_rope(const at::Tensor& x, const at::Tensor& c, const at::Tensor& s) {
  int64_t h = x.size(-1) / 2;
  auto rotated = at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
  return x * c.unsqueeze(1) + rotated * s.unsqueeze(1);
}

at::Tensor ref_swiglu(const at::Tensor& g, const at::Tensor& u) {
  return at::silu(g) * u;
}

// Largest difference in units of the bf16 spacing at the reference's magnitude.
double bf16_ulps(const at::Tensor& a, const at::Tensor& ref) {
  auto r = ref.to(at::kDouble), d = (a.to(at::kDouble) - r).abs();
  auto ulp = at::pow(2.0, at::floor(at::log2(r.abs().clamp_min(1e-30))) - 7);
  return (d / ulp).max().item<double>();
}

// Runs fn (a differentiable function of `inputs`) and returns outputs + input gradients for a
// fixed random upstream gradient.
std::vector<at::Tensor> value_and_grads(
    const std::function<at::Tensor(std::vector<at::Tensor>&)>& fn, std::vector<at::Tensor> inputs,
    const at::Tensor& upstream) {
  for (auto& t : inputs) t = t.detach().clone().requires_grad_(true);
  auto out = fn(inputs);
  torch::autograd::backward({out}, {upstream.to(out.scalar_type())});
  std::vector<at::Tensor> result{out.detach()};
  for (auto& t : inputs) result.push_back(t.grad());
  return result;
}

TEST(Kernels, FastExpIsAccurate) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    double rel =
        std::abs(fast_exp(x) - std::exp(static_cast<double>(x))) / std::exp(static_cast<double>(x));
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 3e-7);  // ~2.5 ulp of fp32
  EXPECT_EQ(fast_exp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isinf(fast_exp(100.0f)));
  for (float v : {0.0f, 1.0f, -2.5f, 3.14159f, 1e-20f, 65504.0f, -0.0f}) {
    EXPECT_EQ(float_to_bf16_bits(v), c10::BFloat16(v).x) << v;
  }
}

TEST(Kernels, RmsNormMatchesReference) {
  at::manual_seed(0);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto x = (at::randn({37, 96}) * 3).to(dtype);
    auto w = (1 + 0.2 * at::randn({96})).to(dtype);
    auto up = at::randn({37, 96});
    auto fused = value_and_grads([](auto& in) { return rms_norm(in[0], in[1], 1e-6); }, {x, w}, up);
    auto ref =
        value_and_grads([](auto& in) { return ref_rms_norm(in[0], in[1], 1e-6); }, {x, w}, up);
    auto exact = value_and_grads([](auto& in) { return ref_rms_norm(in[0], in[1], 1e-6); },
                                 {x.to(at::kDouble), w.to(at::kDouble)}, up.to(at::kDouble));
    if (dtype == at::kFloat) {
      EXPECT_LE(max_abs_diff(fused[0], ref[0]), 1e-5);
      EXPECT_LE(max_abs_diff(fused[1], exact[1]), 1e-5);
      EXPECT_LE(max_abs_diff(fused[2], exact[2]), 1e-4);
    } else {
      EXPECT_LE(bf16_ulps(fused[0], ref[0]), 1.0);  // at most one rounding step apart
      // Gradients in fp32 arithmetic: at least as close to exact as the bf16 reference chain.
      EXPECT_LE(max_abs_diff(fused[1], exact[1]), max_abs_diff(ref[1], exact[1]) * 1.5 + 1e-2);
      EXPECT_LE(max_abs_diff(fused[2], exact[2]), max_abs_diff(ref[2], exact[2]) * 1.5 + 1e-1);
    }
  }
}

TEST(Kernels, RopeMatchesReference) {
  at::manual_seed(1);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto x = at::randn({11, 3, 16}).to(dtype);
    auto angle = at::rand({11, 8}) * 6.28;
    auto c = at::cat({angle.cos(), angle.cos()}, -1).to(dtype);
    auto s = at::cat({angle.sin(), angle.sin()}, -1).to(dtype);
    auto up = at::randn({11, 3, 16});
    auto fused = value_and_grads([&](auto& in) { return rope(in[0], c, s); }, {x}, up);
    auto ref = value_and_grads([&](auto& in) { return ref_rope(in[0], c, s); }, {x}, up);
    auto exact = value_and_grads(
        [&](auto& in) { return ref_rope(in[0], c.to(at::kDouble), s.to(at::kDouble)); },
        {x.to(at::kDouble)}, up.to(at::kDouble));
    if (dtype == at::kFloat) {
      EXPECT_LE(max_abs_diff(fused[0], ref[0]), 1e-6);
      EXPECT_LE(max_abs_diff(fused[1], ref[1]), 1e-6);
    } else {
      EXPECT_TRUE(at::equal(fused[0], ref[0])) << "bf16 forward reproduces every rounding step";
      // The gradient is computed in fp32 and rounded once, so it is at least as close to the
      // exact value as autograd's bf16 chain (which rounds each product).
      EXPECT_LE(max_abs_diff(fused[1], exact[1]), max_abs_diff(ref[1], exact[1]) + 1e-6);
    }
  }
}

TEST(Kernels, SwigluMatchesReference) {
  at::manual_seed(2);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto g = (at::randn({64, 50}) * 4).to(dtype), u = at::randn({64, 50}).to(dtype);
    auto up = at::randn({64, 50});
    auto fused = value_and_grads([](auto& in) { return swiglu(in[0], in[1]); }, {g, u}, up);
    auto ref = value_and_grads([](auto& in) { return ref_swiglu(in[0], in[1]); }, {g, u}, up);
    if (dtype == at::kFloat) {
      for (size_t i = 0; i < 3; ++i) EXPECT_LE(max_abs_diff(fused[i], ref[i]), 2e-5) << i;
    } else {
      EXPECT_LE(bf16_ulps(fused[0], ref[0]), 1.0);
      EXPECT_LE(bf16_ulps(fused[1], ref[1]), 2.0);
      EXPECT_LE(bf16_ulps(fused[2], ref[2]), 2.0);
    }
  }
}

TEST(Kernels, SoftmaxStatsAndGradientMatchFloat64) {
  at::manual_seed(3);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto logits = (at::randn({9, 1000}) * 5).to(dtype);
    auto targets = at::randint(0, 1000, {9}, at::kLong);
    double temperature = 0.8;
    auto z = (logits.to(at::kDouble) / temperature).requires_grad_(true);
    auto logp = at::log_softmax(z, -1);
    auto lp = logp.gather(1, targets.unsqueeze(1)).squeeze(1);
    auto ent = -(logp.exp() * logp).sum(-1);
    auto st = softmax_stats(logits, targets, temperature, true);
    EXPECT_LE(max_abs_diff(st.logprob_R, lp), 1e-5);
    EXPECT_LE(max_abs_diff(st.entropy_R, ent), 1e-5);
    auto gl = at::randn({9}), ge = at::randn({9});
    torch::autograd::backward({lp, ent}, {gl.to(at::kDouble), ge.to(at::kDouble)});
    auto grad_logits = z.grad() / temperature;  // d/d logits = d/dz / T
    auto fused = softmax_stats_backward(logits, targets, temperature, st, gl, ge);
    // fp32: terms p (log p + H) with |log p| up to ~50 carry ~50 * 2^-24 relative rounding;
    // bf16: the gradient is rounded to bf16 (2^-8 relative to values below 1).
    double tol = dtype == at::kFloat ? 2e-5 : 1e-2;
    EXPECT_LE(max_abs_diff(fused.to(at::kDouble), grad_logits), tol);
  }
}

// Not a timed assertion: prints fused vs ATen time on a [4096, 1024] tensor for the record.
TEST(Kernels, ReportThroughputAgainstAten) {
  auto x = at::randn({4096, 1024}), w = at::ones({1024});
  auto time = [](const std::function<void()>& fn) {
    fn();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;
  };
  double fused = time([&] { rms_norm_forward(x, w, 1e-6); });
  double aten = time([&] { ref_rms_norm(x, w, 1e-6); });
  double sw_fused = time([&] { swiglu_forward(x, x); });
  double sw_aten = time([&] { ref_swiglu(x, x); });
  RecordProperty("rms_norm_speedup", std::to_string(aten / fused));
  RecordProperty("swiglu_speedup", std::to_string(sw_aten / sw_fused));
  std::printf("rms_norm fused %.2f ms vs ATen %.2f ms; swiglu fused %.2f ms vs ATen %.2f ms\n",
              fused * 1e3, aten * 1e3, sw_fused * 1e3, sw_aten * 1e3);
}

}  // namespace
}  // namespace furlong::kernels
