// kernels/decode_attention against an fp64 softmax attention over the same cached rows.
//
// The bound, per output element o[b, n, h] (u = fp32 unit roundoff):
// - each score s_l = scale * q . k_l is an H-term fp32 dot product times scale: its error is at
//   most e_l = gamma_{H+1} * scale * sum_h |q_h k_lh| (Higham 3.1, the multiplication by scale
//   adding one rounding);
// - softmax: shifting by the max is exact in effect (it cancels in the ratio); with every score
//   off by at most E = max_l e_l, each weight p_l = exp(s_l) / sum exp changes by a factor
//   within exp(+-2E), and exp, the L-term sum and the division add gamma_{L+3} relatively;
// - o = sum_l p_l v_l accumulates L fp32 products: gamma_{L+1} * sum_l p_l |v_l| more.
// So |o - ref| <= (expm1(2E) + gamma_{L+3} + gamma_{L+1}) * sum_l p_l |v_lh|. bf16: the weights
// are rounded to bf16 before the values product (u_bf16 more, relatively), and the output once
// (u_bf16 |o|); bf16 inputs are exact in fp64.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/tolerances.h"
#include "kernels/decode_attention.h"

namespace furlong::kernels {
namespace {

namespace tol = testing::tol;

struct Case {
  at::Tensor q_BNH, k_SKH, v_SKH, slots;
  std::vector<int64_t> cu;
};

// B sequences of the given lengths, scattered over a shuffled cache of S slots.
Case make_case(const std::vector<int64_t>& lengths, int64_t N, int64_t K, int64_t H,
               at::ScalarType dtype) {
  int64_t total = 0;
  std::vector<int64_t> cu{0};
  for (int64_t len : lengths) cu.push_back(total += len);
  const int64_t S = total + 7;
  Case c;
  c.q_BNH = at::randn({static_cast<int64_t>(lengths.size()), N, H}).to(dtype);
  c.k_SKH = (2.0 * at::randn({S, K, H})).to(dtype);
  c.v_SKH = at::randn({S, K, H}).to(dtype);
  c.slots = at::randperm(S, at::kLong).narrow(0, 0, total).contiguous();
  c.cu = cu;
  return c;
}

// Largest (|o - ref| - bound); <= 0 when every output is within its bound.
double excess_over_bound(const Case& c, const at::Tensor& out, double scale) {
  const int64_t B = c.q_BNH.size(0), N = c.q_BNH.size(1), K = c.k_SKH.size(1);
  const int64_t H = c.q_BNH.size(2), G = N / K;
  const bool bf16 = out.scalar_type() == at::kBFloat16;
  double worst = -1.0;
  for (int64_t b = 0; b < B; ++b) {
    auto slots = c.slots.narrow(0, c.cu[b], c.cu[b + 1] - c.cu[b]);
    const double L = static_cast<double>(slots.numel());
    for (int64_t n = 0; n < N; ++n) {
      auto q = c.q_BNH[b][n].to(at::kDouble);                                    // [H]
      auto k = c.k_SKH.index_select(0, slots).select(1, n / G).to(at::kDouble);  // [L, H]
      auto v = c.v_SKH.index_select(0, slots).select(1, n / G).to(at::kDouble);
      auto p = at::softmax(at::mv(k, q) * scale, 0);
      auto ref = at::mv(v.t(), p);
      const double E =
          (tol::gamma(H + 1, tol::kUFp32) * scale * at::mv(k.abs(), q.abs())).max().item<double>();
      // bf16: each weight is also rounded to bf16 before it multiplies the values.
      const double rel = std::expm1(2 * E) + tol::gamma(L + 3, tol::kUFp32) +
                         tol::gamma(L + 1, tol::kUFp32) + (bf16 ? tol::kUBf16 : 0.0);
      auto bound = rel * at::mv(v.abs().t(), p);
      if (bf16) bound = bound + (ref.abs() + bound) * tol::kUBf16;
      auto got = out[b][n].to(at::kDouble);
      worst = std::max(worst, ((got - ref).abs() - bound).max().item<double>());
    }
  }
  return worst;
}

TEST(DecodeAttention, MatchesFloat64WithinTheDerivedBound) {
  c10::InferenceMode guard;
  at::manual_seed(7);
  const double scale = 1.0 / std::sqrt(128.0);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    // Qwen3-0.6B's heads (16 q / 8 kv, H = 128), MHA, and many query heads per KV head; lengths
    // from 1 (the first decode after a 0-token prompt) to a few hundred.
    for (auto [N, K, H] :
         {std::tuple<int64_t, int64_t, int64_t>{16, 8, 128}, {4, 4, 64}, {12, 1, 40}}) {
      auto c = make_case({1, 5, 33, 300}, N, K, H, dtype);
      ASSERT_TRUE(decode_attention_supported(N, c.k_SKH, c.v_SKH));
      auto out = decode_attention(c.q_BNH, c.k_SKH, c.v_SKH, c.slots, c.cu, scale);
      ASSERT_EQ(out.scalar_type(), dtype);
      EXPECT_LE(excess_over_bound(c, out, scale), 0.0) << dtype << " N=" << N << " K=" << K;
    }
  }
}

// A sequence's output is the same bits alone, in any batch, and on any thread count.
TEST(DecodeAttention, EachSequenceIsIndependentOfTheBatchAndTheThreads) {
  c10::InferenceMode guard;
  at::manual_seed(8);
  const int threads = at::get_num_threads();
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto c = make_case({7, 64, 3}, 16, 8, 128, dtype);
    auto all = decode_attention(c.q_BNH, c.k_SKH, c.v_SKH, c.slots, c.cu, 0.1);
    at::set_num_threads(1);
    auto one_thread = decode_attention(c.q_BNH, c.k_SKH, c.v_SKH, c.slots, c.cu, 0.1);
    at::set_num_threads(threads);
    EXPECT_TRUE(at::equal(all, one_thread));
    auto alone = decode_attention(c.q_BNH.narrow(0, 1, 1), c.k_SKH, c.v_SKH,
                                  c.slots.narrow(0, 7, 64).contiguous(), {0, 64}, 0.1);
    EXPECT_TRUE(at::equal(alone, all.narrow(0, 1, 1))) << dtype;
  }
}

TEST(DecodeAttention, RejectsWhatItCannotCompute) {
  auto k = at::randn({8, 2, 16});
  EXPECT_FALSE(decode_attention_supported(3, k, k));                    // 3 % 2 heads
  EXPECT_FALSE(decode_attention_supported(4, k, k.to(at::kBFloat16)));  // mixed dtypes
  EXPECT_FALSE(decode_attention_supported(4, k.transpose(0, 1), k.transpose(0, 1)));
  EXPECT_FALSE(decode_attention_supported(4, k.to(at::kDouble), k.to(at::kDouble)));
  auto q = at::randn({1, 4, 16});
  EXPECT_THROW(decode_attention(q, k, k, at::tensor({0, 9}, at::kLong), {0, 2}, 1.0),
               std::exception);  // slot 9 is outside the 8-slot cache
  EXPECT_THROW(decode_attention(q, k, k, at::empty({0}, at::kLong), {0, 0}, 1.0),
               std::exception);  // no cached keys
}

}  // namespace
}  // namespace furlong::kernels
