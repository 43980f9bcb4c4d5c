// Numeric tolerances derived from the arithmetic: unit roundoffs, bounds on the rounding error of
// sums and dot products, and the error bound of a softmax row's log-prob and entropy computed in
// fp32 the way furlong's kernel (and ATen's log_softmax) compute them. docs/testing.md,
// "Tolerances and why", states where each test uses them.
//
// Model of floating-point arithmetic (Higham, "Accuracy and Stability of Numerical Algorithms",
// 2nd ed., 2.2): fl(a op b) = (a op b)(1 + d), |d| <= u, with u the unit roundoff of the dtype.
// A sum of n terms in any order (sequential, W SIMD lanes of n/W terms and a tree of log2 W
// horizontal adds, blocked GEMM accumulation) puts every term through at most n - 1 roundings,
// so the bounds below, stated for n roundings, hold for any lane count W >= 1, any blocking and
// any thread split: the tolerances do not depend on which code path a CPU takes.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace furlong::testing::tol {

// Returns `err`; with FURLONG_PRINT_TOLERANCES set in the environment, also prints
// "tolerance <name>: error <err> bound <bound> (<ratio>)", to record the margins per machine.
inline double noted(const char* name, double err, double bound) {
  if (std::getenv("FURLONG_PRINT_TOLERANCES") != nullptr) {
    std::printf("tolerance %s: error %.3g bound %.3g (%.3f)\n", name, err, bound, err / bound);
  }
  return err;
}

// Unit roundoff u = 2^-p for a p-bit significand, round to nearest.
inline constexpr double kUFp32 = 0x1p-24;  // 5.96e-8
inline constexpr double kUBf16 = 0x1p-8;   // 3.91e-3
inline constexpr double kUFp16 = 0x1p-11;  // 4.88e-4
inline constexpr double kUFp64 = 0x1p-53;

// Worst-case constant gamma_n = n u / (1 - n u) (Higham, Lemma 3.1): |fl(sum) - sum| <=
// gamma_{n-1} sum |x_i|. Rigorous but, at n ~ 1e5 in fp32, ~1e-2: far too loose to test with.
inline double gamma(double n, double u) {
  return n * u < 1 ? n * u / (1 - n * u) : HUGE_VAL;
}

// Probabilistic constant (Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4 and 3.1):
// if the rounding errors are mean-independent, |fl(sum) - sum| <= gamma_prob(n) sum |x_i|,
// gamma_prob(n) = exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1 ~ lambda sqrt(n) u. Their Thm 3.1
// states it with a union bound over the n terms (probability >= 1 - 2 n exp(-lambda^2 / 2));
// applying Azuma-Hoeffding to the error sum_k d_k s_k (d_k the k-th rounding, |s_k| <= sum |x_i|
// the partial sum it rounds) gives the same bound with probability >= 1 - 2 exp(-lambda^2 / 2)
// per sum (Higham & Mary 2020, Ipsen & Zhou 2020).
// lambda = 6: 2 exp(-18) = 3e-8 per sum, so over the ~1e4 sums the whole suite bounds this way the
// chance that any of them is outside its bound is < 1e-3, while the bound stays within a factor
// ~6 / sqrt(3) ~ 3.5 of the typical error of a sum of same-sign terms (whose partial sums grow
// linearly, rms sqrt(n / 3) u sum |x|).
inline constexpr double kLambda = 6.0;
inline double failure_probability(double lambda = kLambda) {
  return 2 * std::exp(-lambda * lambda / 2);
}
inline double gamma_prob(double n, double u, double lambda = kLambda) {
  return std::expm1(lambda * std::sqrt(n) * u + n * u * u / (1 - u));
}

// |fl(sum of n terms) - sum| for terms whose absolute values sum to abs_sum.
inline double sum_bound(double n, double abs_sum, double u, double lambda = kLambda) {
  return gamma_prob(n, u, lambda) * abs_sum;
}
// |fl(x . y) - x . y| for length n (one product rounding plus n - 1 additions per term: n
// roundings), abs_dot = sum |x_i y_i|.
inline double dot_bound(double n, double abs_dot, double u, double lambda = kLambda) {
  return gamma_prob(n, u, lambda) * abs_dot;
}

// Relative error of furlong's fast_exp (src/kernels/vec_math.h); kernels_test's FastExpIsAccurate
// asserts it (< 3e-7 = 5.03 u). Also covers Sleef's expf in ATen (1 ulp <= 2 u).
inline constexpr double kExpRelErr = 3e-7;
// A short fp32 computation against its exact value: `roundings` roundings (float constants
// and inputs included) and `exps` calls of exp, on values of magnitude at most `scale`; worst
// case, first order (Higham, Lemma 3.1): (roundings u + exps kExpRelErr) scale.
inline double fp32_chain_bound(double scale, int roundings, int exps = 0);

// Relative error of glibc's logf (< 1 ulp, i.e. <= 2 u relative).
inline constexpr double kLogRelErr = 2 * kUFp32;

inline double fp32_chain_bound(double scale, int roundings, int exps) {
  return (roundings * kUFp32 + exps * kExpRelErr) * scale;
}

// Error bounds for one softmax row z = logits / T (fp32 arithmetic), with m = max z, s = sum
// exp(z - m), t = sum exp(z - m)(z - m), log-prob lp = (z_y - m) - log s and entropy
// H = log s - t / s: src/kernels/cpu_kernels.cpp (softmax_stats_rows) and ATen's log_softmax.
struct SoftmaxRowBound {
  double logprob = 0;           // total bound on |lp_fp32 - lp_exact(reference logits)|
  double entropy = 0;           // total bound on |H_fp32 - H_exact(reference logits)|
  double logprob_rounding = 0;  // the parts from fp32 rounding alone (delta = 0)
  double entropy_rounding = 0;
  double entropy_sensitivity = 0;  // sum_j p_j |z_j - E_p z| / T: |dH| per unit max |d logit|
  double mean_gap = 0;             // A = E_p[m - z] = -t / s
  double entropy_value = 0;        // H of the reference logits (float64)
};

// `logits_V`: the reference logits of one row (any dtype; evaluated in float64). `target`: the
// token whose log-prob is compared. `delta`: a bound on max_j |logits_j - reference_j| for the
// logits the fp32 code actually received (0 when it gets the reference logits themselves).
//
// Derivation (first order in u and delta; each term is named where it is added):
//  (a) logits off by at most delta: dH/dz_j = p_j (E_p z - z_j), so |dH| <= delta / T *
//      sum_j p_j |z_j - E_p z|; dlp/dz_j = [j = y] - p_j, so |dlp| <= 2 delta / T.
//  (b) the sums s and t over V terms, all of one sign: relative error gamma_prob(V) each, plus
//      the mass of the terms below u times the partial sum they are added to (lost outright).
//  (c) per-term errors: exp (kExpRelErr) and the rounding of z_j - m (absolute u (m - z_j),
//      relative u (m - z_j) after exp), weighted by p: u (m - E_p z) = u A for s; t's terms
//      also round the product and carry z_j - m's rounding once more: 2 u + u E_p[(m - z)^2] / A.
//      With T != 1, fl(logits_j / T) errs by u |z_j| (absolute), handled as in (a).
//  Then log s errs by eps_s + kLogRelErr |log s|, t / s by (eps_s + eps_t + u) A, and
//  H = log s + A by eps_s + 2 u |log s| + A (eps_s + eps_t + u) + u |H|;
//  lp = -(m - z_y) - log s by u (m - z_y) + eps_s + 2 u |log s| + u |lp|.
//  Second-order terms are covered by adding delta^2 (1 + E_p[(z - E_p z)^2]) / T^2, generous for
//  the delta <= 1e-4 the tests see.
inline SoftmaxRowBound fp32_softmax_row_bound(const at::Tensor& logits_V, int64_t target,
                                              double temperature = 1.0, double delta = 0.0) {
  const double u = kUFp32;
  auto z = logits_V.to(at::kDouble).flatten() / temperature;
  const double V = static_cast<double>(z.numel());
  const double m = z.max().item<double>();
  auto gap = m - z;  // >= 0
  auto e = at::exp(-gap);
  const double s = e.sum().item<double>();
  auto p = e / s;
  const double A = (p * gap).sum().item<double>();
  const double B = (p * gap * gap).sum().item<double>();
  const double log_s = std::log(s);
  const double H = log_s + A;
  const double Ez = m - A;
  auto dev = (z - Ez).abs();
  const double sens = (p * dev).sum().item<double>();
  const double var = (p * dev * dev).sum().item<double>();
  const double gap_y = gap[target].item<double>();
  const double lp = -gap_y - log_s;

  // (b) The mean-zero model behind gamma_prob fails for terms below the accumulator's
  // spacing: fl(s + x) = s for x < ulp(s) / 2 <= u s, so such terms are lost with a one-sided
  // error (measured: one lane over 151,936 terms loses ~2e-4 of s this way, above
  // gamma_prob(V)). Every addition errs by at most min(x, u |s|), so the terms that can be lost
  // (x_k < u S_{k-1}, S_{k-1} the partial sum before them in index order, one lane: W lanes hold
  // partial sums W times smaller, so fewer terms at risk) are bounded by their whole mass and
  // the rest by gamma_prob.
  auto at_risk_mass = [&](const at::Tensor& x) {
    const double total = x.sum().item<double>();
    if (total <= 0) return 0.0;
    auto before = at::cumsum(x, 0) - x;
    return (x * (x < 1.01 * u * before)).sum().item<double>() / total;
  };
  const double small_s = at_risk_mass(e);
  const double small_t = at_risk_mass(e * gap);
  const double eps_sum = gamma_prob(V, u);
  const double eps_s = eps_sum + small_s + kExpRelErr + u * A;  // (b) + (c)
  const double eps_t = eps_sum + small_t + kExpRelErr + 2 * u + (A > 0 ? u * B / A : 0.0);
  double ent_round = eps_s + kLogRelErr * std::abs(log_s) + A * (eps_s + eps_t + u) + u * H;
  double lp_round = u * gap_y + eps_s + kLogRelErr * std::abs(log_s) + u * std::abs(lp);
  if (temperature != 1.0) {  // fl(logits / T): per-element absolute error u |z_j|, as in (a)
    ent_round += u * (p * z.abs() * dev).sum().item<double>();
    lp_round += u * std::abs(z[target].item<double>()) + u * (p * z.abs()).sum().item<double>();
  }
  const double d = delta / temperature;
  const double second = d * d * (1 + var);
  SoftmaxRowBound b;
  b.logprob_rounding = lp_round;
  b.entropy_rounding = ent_round;
  b.entropy_sensitivity = sens / temperature;
  b.mean_gap = A;
  b.entropy_value = H;
  b.logprob = lp_round + 2 * d + second;
  b.entropy = ent_round + sens * d + second;
  return b;
}

// Elementwise bound on the fp32 gradient of gl * lp + ge * H with respect to the logits of one
// row, as softmax_grad_rows computes it: g_j = (-gl p_j - ge p_j (log p_j + H)) / T, with
// log p_j = fl(logits_j / T) - fl(m + log s) and p_j = fast_exp(log p_j); at the target
// g_y = (gl (1 - p_y) - ge p_y (log p_y + H)) / T. H and log s come from the forward statistics
// (their errors: fp32_softmax_row_bound). log p_j errs by Delta_j = u |z_j| (division, T != 1) +
// err(log s) + u |m + log s| + u |log p_j|, so p_j by Delta_j + kExpRelErr relatively; the
// products and the final division add a few u of each term. Returned in float64, shape [V].
// `delta`: as for fp32_softmax_row_bound, a bound on how far the logits the code received are
// from the reference: log p_j and H move by at most 2 delta / T and (sum_j p_j |z_j - E_p z|)
// delta / T, p_j relatively by 2 delta / T.
inline at::Tensor fp32_softmax_grad_bound(const at::Tensor& logits_V, int64_t target,
                                          double temperature, double gl, double ge,
                                          double delta = 0.0) {
  const double u = kUFp32;
  auto z = logits_V.to(at::kDouble).flatten() / temperature;
  const double m = z.max().item<double>();
  auto gap = m - z;
  auto e = at::exp(-gap);
  const double s = e.sum().item<double>();
  auto p = e / s;
  auto log_p = -gap - std::log(s);
  const auto fwd = fp32_softmax_row_bound(logits_V, target, temperature);
  const double d = delta / temperature;
  const double H = fwd.entropy_value, dH = fwd.entropy_rounding + fwd.entropy_sensitivity * delta;
  const double err_log_s = fwd.logprob_rounding;  // covers eps_s + the log's rounding
  auto dlogp = err_log_s + 2 * d + u * std::abs(m + std::log(s)) + u * log_p.abs();
  if (temperature != 1.0) dlogp = dlogp + u * z.abs();
  auto rel_p = dlogp + kExpRelErr;
  auto c = (log_p + H).abs();
  auto bound =
      std::abs(gl) * p * (rel_p + 2 * u) + std::abs(ge) * p * (c * (rel_p + 3 * u) + dlogp + dH);
  // Target: 1 - p_y (std::exp, <= 1 ulp) adds u and p_y's error once more.
  const double py = p[target].item<double>();
  bound[target] += std::abs(gl) * (py * (rel_p[target].item<double>() + 2 * u) + u);
  return (bound + 2 * u *
                      (std::abs(gl) * (p + (at::arange(z.numel()) == target).to(at::kDouble)) +
                       std::abs(ge) * p * c)) /
         temperature;
}

// Bounds for fp32 log-probs and entropies of logits = hidden head^T / T computed from float64
// inputs rounded to fp32 (models::token_logprobs, any chunking), and for the gradients of
// sum_t gl_t lp_t + ge_t H_t with respect to hidden and head, against float64 autograd.
//  logits: inputs rounded to fp32 (u each) and a dot product of D terms: delta_t =
//  (gamma_prob(D) + 2 u) max_j sum_k |h_tk w_jk|; then fp32_softmax_row_bound with that delta.
//  grad_hidden = G head (sum over V) and grad_head = G^T hidden (sum over T), G the logits'
//  gradient: sum |dG| |w| + (gamma_prob(n) + 2 u) sum |G| |w| (the fp32-rounded upstream
//  gl, ge add u |G| per element, covered by the 2 u).
struct FusedLogprobBounds {
  double logprob = 0, entropy = 0, grad_hidden = 0, grad_head = 0;
};
inline FusedLogprobBounds fp32_fused_logprob_bounds(const at::Tensor& hidden_PD,
                                                    const at::Tensor& head_VD,
                                                    const at::Tensor& targets_T, double temperature,
                                                    const at::Tensor& grad_lp_T,
                                                    const at::Tensor& grad_ent_T) {
  const double u = kUFp32;
  auto h = hidden_PD.detach().to(at::kDouble), w = head_VD.detach().to(at::kDouble);
  const auto T = h.size(0), V = w.size(0), D = h.size(1);
  auto logits = at::mm(h, w.t());
  auto abs_dot = at::mm(h.abs(), w.abs().t());
  FusedLogprobBounds b;
  std::vector<at::Tensor> dG, G;
  for (int64_t t = 0; t < T; ++t) {
    const double delta = (gamma_prob(D, u) + 2 * u) * abs_dot[t].max().item<double>();
    const int64_t y = targets_T[t].item<int64_t>();
    auto row = fp32_softmax_row_bound(logits[t], y, temperature, delta);
    b.logprob = std::max(b.logprob, row.logprob);
    b.entropy = std::max(b.entropy, row.entropy);
    const double gl = grad_lp_T[t].item<double>(), ge = grad_ent_T[t].item<double>();
    dG.push_back(fp32_softmax_grad_bound(logits[t], y, temperature, gl, ge, delta));
    // |G| per element (float64): the exact logits' gradient, d/dz of gl lp + ge H, over T.
    auto z = logits[t] / temperature;
    auto logp = at::log_softmax(z, 0), p = logp.exp();
    const double H = -(p * logp).sum().item<double>();
    auto g = -gl * p - ge * p * (logp + H);
    g[y] += gl;
    G.push_back((g / temperature).abs());
  }
  auto dG_TV = at::stack(dG), G_TV = at::stack(G);
  b.grad_hidden = (at::mm(dG_TV, w.abs()) + (gamma_prob(V, u) + 2 * u) * at::mm(G_TV, w.abs()))
                      .max()
                      .item<double>();
  b.grad_head =
      (at::mm(dG_TV.t(), h.abs()) + (gamma_prob(T, u) + 2 * u) * at::mm(G_TV.t(), h.abs()))
          .max()
          .item<double>();
  return b;
}

// max over rows t and vocabulary entries j of sum_k |h_tk W_jk|: the absolute scale of the
// logits' dot products, the quantity a GEMM's rounding error is proportional to.
inline double head_abs_scale(const at::Tensor& hidden_PD, const at::Tensor& head_VD) {
  return at::mm(hidden_PD.detach().to(at::kFloat).abs(), head_VD.detach().to(at::kFloat).abs().t())
      .max()
      .item<double>();
}

// Rounding budget of a transformer forward pass, per logit, for one implementation against the
// exact result of the same weights. A logit depends on the input through `reductions`
// sequential reductions (per layer: input norm, QKV GEMM, Q K^T, softmax sum, P V, O GEMM,
// post-attention norm, gate/up GEMM, down GEMM = 9; then the final norm and the head GEMM),
// each of at most k_max terms. The rounding errors of all of them are independent, mean-zero
// terms of one martingale, so (as for one sum) their total stays below gamma_prob(reductions *
// k_max) times the absolute scale of the result, taken as head_abs_scale (RMSNorm normalizes
// every block's input, so relative errors are not amplified from block to block; the residual
// sums are absorbed by measuring the scale as a sum of absolute values).
inline double forward_logits_budget(int64_t layers, double k_max, double abs_scale, double u) {
  const double reductions = 9.0 * static_cast<double>(layers) + 2;
  return gamma_prob(reductions * k_max, u) * abs_scale;
}

// y = x W^T (+ b) computed in fp32 (any summation order), against fp64: the largest
// (|y - ref| - bound) over the outputs, <= 0 when every output is within the worst-case bound
// of a D-term dot product plus the bias, gamma_{D+1} (sum_d |x_d w_d| + |b|) (Higham 3.1), and
// for bf16 outputs one more bf16 rounding of the result.
inline double linear_excess_over_bound(const at::Tensor& y, const at::Tensor& x,
                                       const at::Tensor& w, const at::Tensor& b, bool bf16_output) {
  auto x64 = x.to(at::kDouble), w64 = w.to(at::kDouble);
  auto ref = at::mm(x64, w64.t());
  auto magnitude = at::mm(x64.abs(), w64.abs().t());
  if (b.defined()) {
    ref = ref + b.to(at::kDouble);
    magnitude = magnitude + b.to(at::kDouble).abs();
  }
  auto bound = gamma(static_cast<double>(x.size(1)) + 1, kUFp32) * magnitude;
  if (bf16_output) bound = bound + (ref.abs() + bound) * kUBf16;
  return ((y.to(at::kDouble) - ref).abs() - bound).max().item<double>();
}

}  // namespace furlong::testing::tol
