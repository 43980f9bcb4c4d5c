// kernels/decode_attention against an fp64 softmax attention over the same cached rows.
//
// The bound, per output element o[b, n, h] (u = fp32 unit roundoff):
// - each score s_l = scale * q . k_l is an H-term fp32 dot product times scale: its error is at
//   most e_l = gamma_{H+1} * scale * sum_h |q_h k_lh| (Higham 3.1, the multiplication by scale
//   adding one rounding);
// - softmax: shifting by the max is exact in effect (it cancels in the ratio); with every score
//   off by at most E = max_l e_l, each weight p_l = exp(s_l) / sum exp changes by a factor
//   within exp(+-2E), and exp (the kernel's fast_exp: within 2 u, two roundings' worth), the
//   L-term sum and the division add gamma_{L+4} relatively;
// - o = sum_l p_l v_l accumulates L fp32 products: gamma_{L+1} * sum_l p_l |v_l| more.
// So |o - ref| <= (expm1(2E) + gamma_{L+4} + gamma_{L+1}) * sum_l p_l |v_lh|. bf16: the weights
// are rounded to bf16 before the values product (u_bf16 more, relatively), and the output once
// (u_bf16 |o|); bf16 inputs are exact in fp64.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
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
      const double rel = std::expm1(2 * E) + tol::gamma(L + 4, tol::kUFp32) +
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
    // Qwen3-0.6B's heads (16 q / 8 kv, H = 128), MHA, an odd number of query heads per KV head
    // and H = 256 on the vector paths, and many query heads per KV head off them (H = 40);
    // lengths from 1 (the first decode after a 0-token prompt) to a few hundred.
    for (auto [N, K, H] : {std::tuple<int64_t, int64_t, int64_t>{16, 8, 128},
                           {4, 4, 64},
                           {6, 2, 64},
                           {4, 2, 256},
                           {12, 1, 40}}) {
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

// Throughput at Qwen3-0.6B's heads (16 q / 8 kv, H = 128) and decode batch sizes: ms per call
// and the K/V bytes it reads per second, over 28 layers' head-major caches (so that, as in the
// engine, the rows come from memory, not cache), beside the gather + SDPA path. Each sequence's
// slots are consecutive, as the engine's block allocator hands them out. Run with
// --gtest_also_run_disabled_tests. The engine's head-major cache (engine::KvCache on CPU: [K, S, H]
// in memory, viewed as [S, K, H]) gives the same bits as a contiguous [S, K, H] cache with the same
// values, for head dims on the vector path (64, 128) and off it (40).
TEST(DecodeAttention, HeadMajorCacheGivesTheSameBits) {
  c10::InferenceMode guard;
  at::manual_seed(9);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t H : {128, 64, 40}) {
      auto c = make_case({1, 17, 70}, 16, 8, H, dtype);
      auto k_hm = c.k_SKH.transpose(0, 1).contiguous().transpose(0, 1);
      auto v_hm = c.v_SKH.transpose(0, 1).contiguous().transpose(0, 1);
      ASSERT_TRUE(decode_attention_supported(16, k_hm, v_hm));
      auto plain = decode_attention(c.q_BNH, c.k_SKH, c.v_SKH, c.slots, c.cu, 0.1);
      auto head_major = decode_attention(c.q_BNH, k_hm, v_hm, c.slots, c.cu, 0.1);
      EXPECT_TRUE(at::equal(plain, head_major)) << dtype << " H=" << H;
    }
  }
}

TEST(DecodeAttention, DISABLED_ReportThroughput) {
  c10::InferenceMode guard;
  const int64_t N = 16, K = 8, H = 128, layers = 28;
  for (auto dtype : {at::kBFloat16, at::kFloat}) {
    for (auto [B, L] : {std::pair<int64_t, int64_t>{1, 512}, {32, 96}, {64, 96}, {64, 512}}) {
      std::vector<at::Tensor> ks, vs;
      for (int64_t l = 0; l < layers; ++l) {  // head-major, as engine::KvCache stores them
        ks.push_back(at::randn({K, B * L, H}).to(dtype).transpose(0, 1));
        vs.push_back(at::randn({K, B * L, H}).to(dtype).transpose(0, 1));
      }
      std::vector<int64_t> cu{0};
      for (int64_t b = 0; b < B; ++b) cu.push_back(cu.back() + L);
      auto slots = at::arange(B * L, at::kLong);
      auto q = at::randn({B, N, H}).to(dtype);
      auto mask = at::ones({B, 1, 1, L}, at::kBool);
      // The engine's other decode path (paged_forward.cpp): gather, then masked SDPA.
      auto gathered = [&](int64_t l) {
        auto k = ks[l].index_select(0, slots).view({B, L, K, H}).transpose(1, 2);
        auto v = vs[l].index_select(0, slots).view({B, L, K, H}).transpose(1, 2);
        at::scaled_dot_product_attention(q.unsqueeze(2), k, v, mask, 0.0, false, 0.1, true);
      };
      auto ms_per_layer = [&](const std::function<void(int64_t)>& fn) {
        for (int64_t l = 0; l < layers; ++l) fn(l);
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < 3; ++r)
          for (int64_t l = 0; l < layers; ++l) fn(l);
        return 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
               (3.0 * layers);
      };
      const double ms =
          ms_per_layer([&](int64_t l) { decode_attention(q, ks[l], vs[l], slots, cu, 0.1); });
      const double sdpa_ms = ms_per_layer(gathered);
      const double bytes = 2.0 * B * L * K * H * ks[0].element_size();
      std::printf("%s B=%3ld L=%3ld: %.3f ms per layer (%.1f GB/s of K/V); gather + SDPA %.3f\n",
                  dtype == at::kFloat ? "fp32" : "bf16", B, L, ms, bytes / (ms * 1e-3) / 1e9,
                  sdpa_ms);
    }
  }
}

TEST(DecodeAttention, RejectsWhatItCannotCompute) {
  auto k = at::randn({8, 2, 16});
  EXPECT_FALSE(decode_attention_supported(3, k, k));                    // 3 % 2 heads
  EXPECT_FALSE(decode_attention_supported(4, k, k.to(at::kBFloat16)));  // mixed dtypes
  auto strided = at::randn({8, 16, 2}).transpose(1, 2);  // [8, 2, 16], rows not contiguous
  EXPECT_FALSE(decode_attention_supported(4, strided, strided));
  auto head_major = at::randn({2, 8, 16}).transpose(0, 1);  // [8, 2, 16], as KvCache stores it
  EXPECT_TRUE(decode_attention_supported(4, head_major, head_major));
  EXPECT_FALSE(decode_attention_supported(4, k, head_major));  // K and V strides differ
  EXPECT_FALSE(decode_attention_supported(4, k.to(at::kDouble), k.to(at::kDouble)));
  auto q = at::randn({1, 4, 16});
  EXPECT_THROW(decode_attention(q, k, k, at::tensor({0, 9}, at::kLong), {0, 2}, 1.0),
               std::exception);  // slot 9 is outside the 8-slot cache
  EXPECT_THROW(decode_attention(q, k, k, at::empty({0}, at::kLong), {0, 0}, 1.0),
               std::exception);  // no cached keys
}

// write_cache_rows stores a step's rows where index_copy_ does, bit for bit, into a contiguous
// and a head-major cache, and leaves every other slot alone.
TEST(WriteCacheRows, EqualsIndexCopyInContiguousAndHeadMajorCaches) {
  at::manual_seed(21);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto slots = at::tensor({5, 0, 17, 9, 30}, at::kLong);
    auto rows = at::randn({5, 3, 16}).to(dtype);
    auto plain = at::randn({32, 3, 16}).to(dtype);
    auto head_major = at::randn({3, 32, 16}).to(dtype).transpose(0, 1);  // [32, 3, 16]
    for (auto cache : {plain, head_major}) {
      auto expected = cache.clone().index_copy_(0, slots, rows);
      ASSERT_TRUE(write_cache_rows_supported(cache, slots, rows));
      write_cache_rows(cache, slots, rows);
      EXPECT_TRUE(at::equal(cache, expected)) << dtype;
    }
  }
}

TEST(WriteCacheRows, RejectsWhatItCannotWriteAndABadSlotChangesNothing) {
  auto cache = at::zeros({8, 2, 16}), rows = at::ones({2, 2, 16});
  EXPECT_FALSE(write_cache_rows_supported(cache, at::tensor({0, 1}, at::kLong),
                                          rows.to(at::kBFloat16)));  // mixed dtypes
  EXPECT_FALSE(write_cache_rows_supported(cache, at::tensor({0, 1}, at::kInt), rows));
  EXPECT_FALSE(write_cache_rows_supported(cache, at::tensor({0}, at::kLong), rows));
  EXPECT_FALSE(write_cache_rows_supported(at::zeros({8, 16, 2}).transpose(1, 2),
                                          at::tensor({0, 1}, at::kLong), rows));
  EXPECT_THROW(write_cache_rows(cache, at::tensor({3, 8}, at::kLong), rows), std::exception);
  EXPECT_THROW(write_cache_rows(cache, at::tensor({-1, 3}, at::kLong), rows), std::exception);
  EXPECT_TRUE(at::equal(cache, at::zeros({8, 2, 16})));  // the valid slot 3 was not written
}

}  // namespace
}  // namespace furlong::kernels
