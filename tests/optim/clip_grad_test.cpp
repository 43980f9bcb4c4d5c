// clip_grad_norm against torch.nn.utils.clip_grad_norm_ (scripts/oracles/optim_reference.py),
// unsharded and split over two simulated ranks.
#include "optim/clip_grad.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "common/tolerances.h"
#include "optim_oracle.h"

namespace furlong::optim {
namespace {

using testing::ClipCase;
using testing::max_ulp_diff;
using testing::oracle_tensor;

struct Oracle {
  std::vector<at::Tensor> grads, clipped;
  double torch_norm = 0, exact_norm = 0;
};

Oracle load(const ClipCase& c) {
  auto f = testing::oracle_file("clip_" + c.name);
  Oracle o;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    o.grads.push_back(oracle_tensor(*f, "grad." + std::to_string(i)));
    o.clipped.push_back(oracle_tensor(*f, "clipped." + std::to_string(i)));
  }
  o.torch_norm = f->tensor("norm").item<double>();
  o.exact_norm = f->tensor("norm_f64").item<double>();
  return o;
}

// Parameters (zeros, requiring grad like real ones) holding copies of `grads`.
std::vector<at::Tensor> params_with(const std::vector<at::Tensor>& grads) {
  std::vector<at::Tensor> params;
  for (const auto& g : grads) {
    params.push_back(at::zeros_like(g).requires_grad_(true));
    params.back().mutable_grad() = g.clone();
  }
  return params;
}

double rel(double a, double b) {
  return std::abs(a - b) / std::abs(b);
}

// Tolerances (tests/common/tolerances.h). A gradient norm sums n squares (positive terms) per
// tensor in fp32, then adds the per-tensor sums (a few more terms) and takes the square root:
// relative error <= gamma_prob(n + tensors) / 2 + u for any blocking, lane count or shard
// split, with n the largest tensor. Two fp32 implementations: twice that.
double norm_tol_one(const std::vector<at::Tensor>& grads) {
  int64_t n = 0;
  for (const auto& g : grads) n = std::max(n, g.numel());
  const double terms = static_cast<double>(n + static_cast<int64_t>(grads.size()));
  return furlong::testing::tol::gamma_prob(terms, furlong::testing::tol::kUFp32) / 2 +
         furlong::testing::tol::kUFp32;
}

// Clipped grads g * c: the two coefficients differ by the norms' relative difference d plus
// the reciprocal and the eps addition (2 u), and each product rounds once (<= 1/2 ulp each);
// an ulp of x is >= u |x|, so the results are <= d / u + 2 + 1 ulps apart.
int64_t clipped_ulps(double norm_rel_diff, double u) {
  return static_cast<int64_t>(std::ceil(norm_rel_diff / u)) + 3;
}

// Tolerances (fp32): both sides accumulate each tensor's sum of squares in fp32 (different
// blockings): norms within 2 norm_tol_one of each other (observed ~1e-7 relative). The clip
// coefficient is computed in double here and in fp32 by torch (max_norm * reciprocal(norm +
// 1e-6)), so the clipped grads differ by clipped_ulps of the measured norm difference
// (observed <= 2 ulp).
TEST(ClipGradOracle, Fp32MatchesTorch) {
  for (const char* name : {"clip_fp32", "noclip_fp32"}) {
    const auto& c = testing::clip_case(name);
    auto o = load(c);
    auto params = params_with(o.grads);
    double norm = clip_grad_norm(params, c.max_norm, {});
    EXPECT_LT(rel(norm, o.torch_norm), 2 * norm_tol_one(o.grads))
        << name << " " << norm << " vs " << o.torch_norm;
    EXPECT_LT(rel(norm, o.exact_norm), norm_tol_one(o.grads)) << name;
    bool clips = c.max_norm / (o.exact_norm + 1e-6) < 1;
    EXPECT_EQ(clips, std::string(name) == "clip_fp32");
    for (size_t i = 0; i < params.size(); ++i) {
      // Unclipped grads are untouched (torch multiplies by exactly 1.0: also identical).
      EXPECT_LE(max_ulp_diff(params[i].grad(), o.clipped[i]),
                clips ? clipped_ulps(rel(norm, o.torch_norm), furlong::testing::tol::kUFp32) : 0)
          << name << " " << i;
    }
  }
}

// bf16 grads: furlong accumulates the norm in fp32 and returns it in double; torch returns the
// norm rounded to bf16 (its _foreach_norm keeps the grads' dtype). So furlong's norm matches the
// exact float64 norm within norm_tol_one (squares of bf16 values are exact in fp32) and torch's
// within one bf16 rounding more (u_bf16 = 2^-8 relative); the clipped bf16 grads then differ by
// clipped_ulps in bf16 units (observed <= 2 bf16 ulp).
TEST(ClipGradOracle, Bf16NormIsAccumulatedInFp32) {
  const auto& c = testing::clip_case("clip_bf16");
  auto o = load(c);
  auto params = params_with(o.grads);
  double norm = clip_grad_norm(params, c.max_norm, {});
  EXPECT_LT(rel(norm, o.exact_norm), norm_tol_one(o.grads));
  EXPECT_LT(rel(norm, o.torch_norm), furlong::testing::tol::kUBf16 + 2 * norm_tol_one(o.grads));
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].grad().scalar_type(), at::kBFloat16);
    EXPECT_LE(max_ulp_diff(params[i].grad(), o.clipped[i]),
              clipped_ulps(rel(norm, o.torch_norm), furlong::testing::tol::kUBf16))
        << i;
  }
}

// Non-finite norms are returned and not skipped: inf -> coefficient 0 (the inf element becomes
// NaN, the rest 0); NaN -> every grad NaN. Same as torch with error_if_nonfinite=False.
TEST(ClipGradOracle, NonFiniteNormsFollowTorch) {
  for (const char* name : {"inf", "nan"}) {
    const auto& c = testing::clip_case(name);
    auto o = load(c);
    auto params = params_with(o.grads);
    double norm = clip_grad_norm(params, c.max_norm, {});
    EXPECT_EQ(std::isinf(norm), std::isinf(o.torch_norm)) << name;
    EXPECT_EQ(std::isnan(norm), std::isnan(o.torch_norm)) << name;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(max_ulp_diff(params[i].grad(), o.clipped[i]), 0) << name << " " << i;
    }
  }
}

// max_norm <= 0 disables clipping (torch would scale by 0) but the norm is still returned.
TEST(ClipGrad, NonPositiveMaxNormOnlyMeasures) {
  auto o = load(testing::clip_case("clip_fp32"));
  for (double max_norm : {0.0, -1.0}) {
    auto params = params_with(o.grads);
    double norm = clip_grad_norm(params, max_norm, {});
    EXPECT_LT(rel(norm, o.torch_norm), 2 * norm_tol_one(o.grads));
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(at::equal(params[i].grad(), o.grads[i]));
    }
  }
}

// Splits each grad on dim 0 into two "ranks" (uneven; a 0-dim grad goes whole to rank 0 and
// rank 1 holds an empty slice). Each rank's callback plays the all-reduce: it returns
// sum0 + sum1 in rank order, so both ranks see the same bits.
TEST(ClipGradOracle, TwoShardsGiveTheUnshardedNormAndGrads) {
  const auto& c = testing::clip_case("clip_fp32");
  auto o = load(c);
  std::vector<at::Tensor> shard0, shard1;
  for (const auto& g : o.grads) {
    auto flat = g.dim() == 0 ? g.reshape({1}) : g;
    int64_t cut = (flat.size(0) + 1) / 2;
    shard0.push_back(g.dim() == 0 ? g.clone() : flat.slice(0, 0, cut).clone());
    shard1.push_back(g.dim() == 0 ? at::empty({0}, g.options()) : flat.slice(0, cut).clone());
  }
  auto p0 = params_with(shard0), p1 = params_with(shard1);
  double sum0 = local_grad_sq_sum(p0), sum1 = local_grad_sq_sum(p1);
  int calls0 = 0, calls1 = 0;
  double n0 = clip_grad_norm(p0, c.max_norm, [&](double mine) { return ++calls0, mine + sum1; });
  double n1 = clip_grad_norm(p1, c.max_norm, [&](double mine) { return ++calls1, sum0 + mine; });
  EXPECT_EQ(calls0, 1);
  EXPECT_EQ(calls1, 1);
  EXPECT_EQ(n0, n1);  // every rank computes the same coefficient
  auto unsharded = params_with(o.grads);
  double n = clip_grad_norm(unsharded, c.max_norm, {});
  EXPECT_LT(rel(n0, n), 2 * norm_tol_one(o.grads));  // fp32 per-tensor sums of different slices
  EXPECT_LT(rel(n0, o.torch_norm), 2 * norm_tol_one(o.grads));
  for (size_t i = 0; i < o.grads.size(); ++i) {
    auto joined = o.grads[i].dim() == 0
                      ? p0[i].grad().clone()
                      : at::cat({p0[i].grad(), p1[i].grad()}).reshape(o.grads[i].sizes());
    EXPECT_LE(max_ulp_diff(joined, o.clipped[i]), 4) << i;
  }
}

// A rank without grads still takes part in the collective (a missing call would hang the
// others) and returns the global norm.
TEST(ClipGrad, RankWithoutGradsStillCallsTheCollective) {
  std::vector<at::Tensor> params{at::zeros({3}), at::zeros({2})};
  int calls = 0;
  double norm = clip_grad_norm(params, 1.0, [&](double mine) {
    ++calls;
    EXPECT_EQ(mine, 0.0);
    return mine + 25.0;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(norm, 5.0);
}

}  // namespace
}  // namespace furlong::optim
