// Fused CPU kernels against their ATen references (the op-for-op transformers formulas), forward
// and backward, fp32 and bf16, plus throughput against the unfused ATen chains (printed).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>

#include "common/test_util.h"
#include "common/tolerances.h"
#include "kernels/cpu_kernels.h"
#include "kernels/fused_ops.h"
#include "kernels/vec_math.h"

namespace furlong::kernels {
namespace {

using testing::max_abs_diff;
namespace tol = testing::tol;
constexpr double u32 = tol::kUFp32;

// fast_exp's relative error, from its arithmetic (src/kernels/vec_math.h): k ln2_hi is exact
// (ln2_hi has 16 significant bits, |k| <= 128) and so is x - k ln2_hi (Sterbenz); subtracting
// k ln2_lo rounds once (u); the degree-7 Horner evaluation at |r| <= ln2/2 errs by at most
// gamma_14 p(|r|) <= gamma_14 e^{|r|} (Higham, 5.1), i.e. relative to p(r) >= e^{-|r|} by
// gamma_14 e^{2|r|} = 2 gamma_14 (without FMA; with FMA gamma_7 suffices); the Taylor
// truncation is (ln2/2)^8 / 8! * e^{ln2/2} < 1e-8; scaling by 2^k is exact. Total ~29.5 u =
// 1.8e-6 worst case (observed ~2.5 ulp). tol::kExpRelErr, used for the softmax bounds, is the
// observed-and-asserted 3e-7 and is checked against this.
const double kFastExpBound = 2 * tol::gamma(14, u32) + u32 + 1e-8;

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
  EXPECT_LT(tol::noted("fast_exp_rel", worst, kFastExpBound), kFastExpBound);
  // The softmax bounds (tests/common/tolerances.h) use kExpRelErr; it must cover fast_exp here.
  EXPECT_LT(worst, tol::kExpRelErr);  // observed ~2.5 ulp = 1.5e-7
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
    // Bounds from the arithmetic, evaluated in float64 on the inputs. r = rsqrt(mean x^2 + eps):
    // D = 96 positive squares summed (gamma_prob(D + 1) relative; any lane count), r's own
    // rounding (1 / sqrt: 2 u, or rsqrt + Newton step: ~2 u) halves the first: eps_r =
    // gamma_prob(D + 1) / 2 + 2 u. y = w (x r): 2 more roundings.
    const int64_t D = x.size(1), R = x.size(0);
    auto xd = x.to(at::kDouble), wd = w.to(at::kDouble), gd = up.to(at::kDouble);
    auto r = at::rsqrt(xd.pow(2).mean(-1, true) + 1e-6);
    const double eps_r = tol::gamma_prob(D + 1, u32) / 2 + 2 * u32;
    const double y_abs = (wd.abs() * xd.abs() * r).max().item<double>();
    // dx = r (w g) - x r^3 mean(x w g): the sum of D mixed-sign terms errs by gamma_prob(D) of
    // its absolute value, r by eps_r (r^3: 3 eps_r), plus ~6 roundings per element; dx_abs is the
    // same formula on absolute values (an upper bound on every intermediate's magnitude).
    auto first = r * (wd * gd).abs(), mean_abs = (xd * wd * gd).abs().mean(-1, true);
    auto second = xd.abs() * r.pow(3) * mean_abs;
    const double dx_bound =
        (first * (eps_r + 3 * u32) + second * (3 * eps_r + tol::gamma_prob(D, u32) + 6 * u32))
            .max()
            .item<double>();
    // dw = sum over R = 37 rows of g x r: gamma_prob(R) of the absolute sum, plus each term's
    // error (eps_r + 2 u).
    const double dw_bound =
        ((gd * xd * r).abs().sum(0) * (tol::gamma_prob(R, u32) + eps_r + 2 * u32))
            .max()
            .item<double>();
    if (dtype == at::kFloat) {
      // Two fp32 implementations of y, each within (eps_r + 2 u) |y| of the exact value.
      EXPECT_LE(tol::noted("rms_norm_y_fp32", max_abs_diff(fused[0], ref[0]),
                           2 * (eps_r + 2 * u32) * y_abs),
                2 * (eps_r + 2 * u32) * y_abs);
      EXPECT_LE(tol::noted("rms_norm_dx_fp32", max_abs_diff(fused[1], exact[1]), dx_bound),
                dx_bound);
      EXPECT_LE(tol::noted("rms_norm_dw_fp32", max_abs_diff(fused[2], exact[2]), dw_bound),
                dw_bound);
    } else {
      EXPECT_LE(bf16_ulps(fused[0], ref[0]), 1.0);  // at most one rounding step apart
      // Gradients in fp32 arithmetic from bf16 upstream values (each u_bf16 off the fp32 `up`
      // the exact chain uses: relative u_bf16 of the absolute-value formula), rounded once to
      // bf16 (u_bf16 of the value): at least as close to exact as the bf16 reference chain,
      // with that much slack.
      const double dx_abs = (first + second).max().item<double>();
      const double dw_abs = (gd * xd * r).abs().sum(0).max().item<double>();
      EXPECT_LE(max_abs_diff(fused[1], exact[1]),
                max_abs_diff(ref[1], exact[1]) * 1.5 + 2 * tol::kUBf16 * dx_abs + dx_bound);
      EXPECT_LE(max_abs_diff(fused[2], exact[2]),
                max_abs_diff(ref[2], exact[2]) * 1.5 + 2 * tol::kUBf16 * dw_abs + dw_bound);
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
    // y = x c + rot(x) s: two products and an add, <= gamma_3 (|x c| + |rot(x) s|) for each
    // implementation (fewer with FMA); the gradient has the same form in the upstream values.
    // |x c| + |rot(x) s| (rot swaps the halves and negates one), per element.
    auto abs_rope = [&](const at::Tensor& v) {
      auto a = v.to(at::kDouble).abs();
      int64_t h = a.size(-1) / 2;
      auto swapped = at::cat({a.narrow(-1, h, h), a.narrow(-1, 0, h)}, -1);
      return a * c.to(at::kDouble).abs().unsqueeze(1) +
             swapped * s.to(at::kDouble).abs().unsqueeze(1);
    };
    auto abs_y = abs_rope(x), abs_g = abs_rope(up);
    const double y_bound = tol::gamma(3, u32) * abs_y.max().item<double>();
    const double g_bound = tol::gamma(3, u32) * abs_g.max().item<double>();
    if (dtype == at::kFloat) {
      EXPECT_LE(tol::noted("rope_y_fp32", max_abs_diff(fused[0], ref[0]), 2 * y_bound),
                2 * y_bound);
      EXPECT_LE(tol::noted("rope_dx_fp32", max_abs_diff(fused[1], ref[1]), 2 * g_bound),
                2 * g_bound);
    } else {
      EXPECT_TRUE(at::equal(fused[0], ref[0])) << "bf16 forward reproduces every rounding step";
      // The gradient is computed in fp32 and rounded once, so it is at least as close to the
      // exact value as autograd's bf16 chain (which rounds each product).
      EXPECT_LE(max_abs_diff(fused[1], exact[1]), max_abs_diff(ref[1], exact[1]) + g_bound);
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
      // out = g / (1 + exp(-g)) u. Per implementation: exp (kExpRelErr, relative; it enters
      // sigma(g) scaled by e/(1+e) <= 1), 1 + e, the division and the product: kExpRelErr + 3 u
      // of |out|. dg = up u sigma (1 + g (1 - sigma)) cancels near g = -1.28, so bound it on the
      // absolute-value formula: sigma's relative error kExpRelErr (1 + |g|) (the exp error moves
      // sigma by sigma (1 - sigma) kExpRelErr and 1 - sigma likewise) plus ~6 roundings.
      // du = up silu(g): as out, one more product. Twice each for two implementations.
      auto gd = g.to(at::kDouble), ud = u.to(at::kDouble), upd = up.to(at::kDouble);
      auto sig = at::sigmoid(gd);
      const double e = tol::kExpRelErr;
      auto out_abs = (gd * sig * ud).abs();
      auto dg_abs = (upd * ud).abs() * sig * (1 + gd.abs() * (1 - sig));
      auto du_abs = (upd * gd * sig).abs();
      const double bounds[3] = {2 * ((e + 3 * u32) * out_abs).max().item<double>(),
                                2 * ((e * (1 + gd.abs()) + 6 * u32) * dg_abs).max().item<double>(),
                                2 * ((e + 4 * u32) * du_abs).max().item<double>()};
      for (size_t i = 0; i < 3; ++i)
        EXPECT_LE(tol::noted("swiglu_fp32", max_abs_diff(fused[i], ref[i]), bounds[i]), bounds[i])
            << i;
    } else {
      EXPECT_LE(bf16_ulps(fused[0], ref[0]), 1.0);
      EXPECT_LE(bf16_ulps(fused[1], ref[1]), 2.0);
      EXPECT_LE(bf16_ulps(fused[2], ref[2]), 2.0);
    }
  }
}

// The softmax bound must hold for every lane count a CPU may use: W = 16 (x86-64-v4 clone),
// 8 (v3, AVX2), 4 (baseline SSE2) or 1 (not vectorized). Simulates softmax_stats_rows' sums
// in fp32 with W lanes of V/W sequential terms and a sequential horizontal add, over the Qwen3
// vocabulary size, and checks the entropy and log-prob against float64 within
// tol::fp32_softmax_row_bound (which takes n = V, any W). std::exp stands in for fast_exp (both
// within kExpRelErr). Measured here: |dH| ~2e-4 at W = 1, ~2e-5 at W = 8, ~1e-5 at W = 16.
TEST(Kernels, SoftmaxBoundHoldsForEveryLaneCount) {
  at::manual_seed(5);
  const int64_t V = 151936;
  auto logits = at::randn({4, V}) * 4;  // logit scale of the CLI test's model (init 0.5)
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const float* z = logits[r].data_ptr<float>();
    const int64_t y = (r * 7919) % V;
    auto b = tol::fp32_softmax_row_bound(logits[r], y);
    auto z64 = logits[r].to(at::kDouble);
    auto logp = at::log_softmax(z64, 0);
    const double H = -(logp.exp() * logp).sum().item<double>(), lp = logp[y].item<double>();
    float m = -INFINITY;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, z[j]);
    for (int W : {1, 4, 8, 16}) {
      std::vector<float> s_lane(static_cast<size_t>(W), 0.0f), t_lane(static_cast<size_t>(W), 0.0f);
      for (int64_t j = 0; j < V; ++j) {
        float zs = z[j] - m, e = std::exp(zs);
        s_lane[static_cast<size_t>(j % W)] += e;
        t_lane[static_cast<size_t>(j % W)] += e * zs;
      }
      float s = 0.0f, t = 0.0f;
      for (int l = 0; l < W; ++l)
        s += s_lane[static_cast<size_t>(l)], t += t_lane[static_cast<size_t>(l)];
      float log_s = std::log(s);
      float ent = log_s - t / s, logprob = (z[y] - m) - log_s;
      EXPECT_LE(tol::noted("softmax_lanes_entropy", std::abs(ent - H), b.entropy), b.entropy)
          << "W = " << W;
      EXPECT_LE(tol::noted("softmax_lanes_logprob", std::abs(logprob - lp), b.logprob), b.logprob)
          << "W = " << W;
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
    // Per row, tol::fp32_softmax_row_bound on the (exact, float64) values of the fp32/bf16
    // logits the kernel reads: sums over V = 1000 terms, exp, z - m, the division by T.
    double lp_tol = 0, ent_tol = 0;
    for (int64_t r = 0; r < logits.size(0); ++r) {
      auto b = tol::fp32_softmax_row_bound(logits[r], targets[r].item<int64_t>(), temperature);
      lp_tol = std::max(lp_tol, b.logprob);
      ent_tol = std::max(ent_tol, b.entropy);
    }
    EXPECT_LT(std::max(lp_tol, ent_tol), 1e-3) << "the bound must stay meaningful";
    EXPECT_LE(tol::noted("softmax_logprob", max_abs_diff(st.logprob_R, lp), lp_tol), lp_tol);
    EXPECT_LE(tol::noted("softmax_entropy", max_abs_diff(st.entropy_R, ent), ent_tol), ent_tol);
    auto gl = at::randn({9}), ge = at::randn({9});
    torch::autograd::backward({lp, ent}, {gl.to(at::kDouble), ge.to(at::kDouble)});
    auto grad_logits = z.grad() / temperature;  // d/d logits = d/dz / T
    auto fused = softmax_stats_backward(logits, targets, temperature, st, gl, ge);
    // Elementwise: tol::fp32_softmax_grad_bound (terms p (log p + H) with |log p| up to ~50
    // carry ~50 u relative rounding); bf16 adds the final rounding to bf16, u_bf16 |g|.
    auto bound = at::stack([&] {
      std::vector<at::Tensor> rows;
      for (int64_t r = 0; r < logits.size(0); ++r) {
        rows.push_back(tol::fp32_softmax_grad_bound(logits[r], targets[r].item<int64_t>(),
                                                    temperature, gl[r].item<double>(),
                                                    ge[r].item<double>()));
      }
      return rows;
    }());
    if (dtype == at::kBFloat16) bound = bound + tol::kUBf16 * grad_logits.abs();
    auto excess = (fused.to(at::kDouble) - grad_logits).abs() - bound;
    EXPECT_LE(excess.max().item<double>(), 0.0);
    EXPECT_LE(tol::noted("softmax_grad", max_abs_diff(fused.to(at::kDouble), grad_logits),
                         bound.max().item<double>()),
              bound.max().item<double>());
  }
}

// Not a test: prints fused vs ATen time on a [4096, 1024] tensor, run by hand like the other
// DISABLED_ReportThroughput probes (--gtest_also_run_disabled_tests).
TEST(Kernels, DISABLED_ReportThroughputAgainstAten) {
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
