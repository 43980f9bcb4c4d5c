#include "kernels/avx512_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/group_tiles.h"
#include "kernels/vec_math.h"

namespace furlong::kernels {
namespace {

#define FURLONG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define FURLONG_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#define FURLONG_TILE inline __attribute__((always_inline))

constexpr int kTileW = 4;      // weight rows per register tile
constexpr int kTileX = 6;      // fp32: input rows per register tile (24 accumulators)
constexpr int kTileXBf16 = 4;  // bf16: 16 accumulators (a tile of 6 rows was slower)
constexpr int kTileW1 = 8;     // weight rows per tile when there is one input row
constexpr bool kPrefetch = true;

bool aten_capped_below_avx512() {
  const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
  if (cap == nullptr) return false;
  const std::string value(cap);
  return value == "avx2" || value == "default";
}

// The operands of one call, as raw pointers (y is fp32 or bf16 bits, per the kernel).
template <class XT, class WT, class YT>
struct Operands {
  const XT* x;        // [M, D]
  const WT* w;        // [F, D]
  YT* y;              // [M, F]
  const float* bias;  // [F] or null
  int64_t M, D, F;
};

// The lane sums of four accumulators, [sum a, sum b, sum c, sum d]: pairs within each 128-bit
// lane, then the four lanes. Every position takes the same additions in the same order, and
// lanes never mix across positions, so a weight row's sum does not depend on its position in
// the tile or on what the other positions hold (zeros where a tile has fewer than 4 rows).
// 13 instructions for four sums, where four full reductions take about 32.
FURLONG_AVX512 FURLONG_TILE __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512d ab64 = _mm512_castps_pd(ab), cd64 = _mm512_castps_pd(cd);
  const __m512 lanes = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ab64, cd64)),
                                     _mm512_castpd_ps(_mm512_unpackhi_pd(ab64, cd64)));
  const __m256 halves =
      _mm256_add_ps(_mm512_castps512_ps256(lanes),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(halves), _mm256_extractf128_ps(halves, 1));
}

FURLONG_AVX512 FURLONG_TILE void store_sums(float* y, __m128 sums, __mmask8 k) {
  _mm_mask_storeu_ps(y, k, sums);
}
FURLONG_AVX512 FURLONG_TILE void store_sums(uint16_t* y, __m128 sums, __mmask8 k) {
  alignas(16) float v[4];
  _mm_store_ps(v, sums);
  for (int i = 0; i < 4; ++i) {
    if ((k >> i) & 1) y[i] = float_to_bf16_bits(v[i]);
  }
}

// Writes y[m + j][f + i] = lane sum of acc[i][j] (+ bias[f + i]), four weight rows at a time.
template <int TW, int TX, class XT, class WT, class YT>
FURLONG_AVX512 FURLONG_TILE void store_tile(const Operands<XT, WT, YT>& o, __m512 (&acc)[TW][TX],
                                            int64_t f, int64_t m) {
  const __m512 zero = _mm512_setzero_ps();
  // acc[i][j], or zeros past the tile's last weight row (the index stays in bounds).
  auto lanes = [&](int i, int j) { return i < TW ? acc[i < TW ? i : 0][j] : zero; };
  for (int g = 0; g < TW; g += 4) {
    const int n = TW - g < 4 ? TW - g : 4;
    const __mmask8 k = static_cast<__mmask8>((1u << n) - 1);
    const __m128 bias = o.bias ? _mm_maskz_loadu_ps(k, o.bias + f + g) : _mm_setzero_ps();
    for (int j = 0; j < TX; ++j) {
      const __m128 sums = reduce4(lanes(g, j), lanes(g + 1, j), lanes(g + 2, j), lanes(g + 3, j));
      store_sums(o.y + (m + j) * o.F + f + g, _mm_add_ps(sums, bias), k);
    }
  }
}

// ---- fp32 inputs: fp32 FMAs over 16 lanes, weights fp32 or bf16 (widened exactly) ----

FURLONG_AVX512 FURLONG_TILE __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}
FURLONG_AVX512 FURLONG_TILE __m512 load16(const uint16_t* p) {
  __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
FURLONG_AVX512 FURLONG_TILE __m512 load16(const float* p, __mmask16 k) {
  return _mm512_maskz_loadu_ps(k, p);
}
FURLONG_AVX512 FURLONG_TILE __m512 load16(const uint16_t* p, __mmask16 k) {
  __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// y[m + j][f + i] for TW weight rows from f and TX input rows from m. The first tile of a
// weight tile (Prefetch) also prefetches the next weight tile's rows.
template <int TW, int TX, bool Prefetch, class WT, class YT>
FURLONG_AVX512 FURLONG_TILE void tile_f32(const Operands<float, WT, YT>& o, int64_t f, int64_t m) {
  __m512 acc[TW][TX];
  for (int i = 0; i < TW; ++i)
    for (int j = 0; j < TX; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t D = o.D;
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    __m512 xv[TX];
    for (int j = 0; j < TX; ++j) xv[j] = load16(o.x + (m + j) * D + d);
    for (int i = 0; i < TW; ++i) {
      const WT* row = o.w + (f + i) * D + d;
      if constexpr (kPrefetch && Prefetch)
        _mm_prefetch(reinterpret_cast<const char*>(row + TW * D), _MM_HINT_T0);
      const __m512 wv = load16(row);
      for (int j = 0; j < TX; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  if (d < D) {
    const __mmask16 k = static_cast<__mmask16>((1u << (D - d)) - 1);
    __m512 xv[TX];
    for (int j = 0; j < TX; ++j) xv[j] = load16(o.x + (m + j) * D + d, k);
    for (int i = 0; i < TW; ++i) {
      const __m512 wv = load16(o.w + (f + i) * D + d, k);
      for (int j = 0; j < TX; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  store_tile<TW, TX>(o, acc, f, m);
}

// Every input row against TW weight rows: whole kTileX tiles, then the remainder.
template <int TW, class WT, class YT>
FURLONG_AVX512 FURLONG_TILE void rows_f32(const Operands<float, WT, YT>& o, int64_t f) {
  static_assert(kTileX == 6, "the remainder cases below cover 1..5 rows");
  int64_t m = 0;
  if (o.M >= kTileX) {
    tile_f32<TW, kTileX, true>(o, f, 0);
    m = kTileX;
  }
  for (; m + kTileX <= o.M; m += kTileX) tile_f32<TW, kTileX, false>(o, f, m);
  const bool first = m == 0;
  switch (o.M - m) {
    case 5:
      return first ? tile_f32<TW, 5, true>(o, f, m) : tile_f32<TW, 5, false>(o, f, m);
    case 4:
      return first ? tile_f32<TW, 4, true>(o, f, m) : tile_f32<TW, 4, false>(o, f, m);
    case 3:
      return first ? tile_f32<TW, 3, true>(o, f, m) : tile_f32<TW, 3, false>(o, f, m);
    case 2:
      return first ? tile_f32<TW, 2, true>(o, f, m) : tile_f32<TW, 2, false>(o, f, m);
    case 1:
      return first ? tile_f32<TW, 1, true>(o, f, m) : tile_f32<TW, 1, false>(o, f, m);
    default:
      return;
  }
}

// One input row: kTileW1 weight rows per tile, so that as many independent FMA chains hide
// the FMA latency (a lone chain per row runs at a fraction of the memory bandwidth).
template <class WT, class YT>
FURLONG_AVX512 void slab_f32(const Operands<float, WT, YT>& o, int64_t f_begin, int64_t f_end) {
  int64_t f = f_begin;
  if (o.M == 1) {
    for (; f + kTileW1 <= f_end; f += kTileW1) tile_f32<kTileW1, 1, true>(o, f, 0);
  }
  for (; f + kTileW <= f_end; f += kTileW) rows_f32<kTileW>(o, f);
  for (; f < f_end; ++f) rows_f32<1>(o, f);
}

// ---- bf16 inputs and weights: vdpbf16ps, 16 lanes of pair sums in fp32 ----

FURLONG_AVX512_BF16 FURLONG_TILE __m512bh load32(const uint16_t* p) {
  return (__m512bh)_mm512_loadu_si512(p);
}
FURLONG_AVX512_BF16 FURLONG_TILE __m512bh load32(const uint16_t* p, __mmask32 k) {
  return (__m512bh)_mm512_maskz_loadu_epi16(k, p);
}

template <int TW, int TX>
FURLONG_AVX512_BF16 FURLONG_TILE void tile_bf16(const Operands<uint16_t, uint16_t, uint16_t>& o,
                                                int64_t f, int64_t m) {
  __m512 acc[TW][TX];
  for (int i = 0; i < TW; ++i)
    for (int j = 0; j < TX; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t D = o.D;
  int64_t d = 0;
  for (; d + 32 <= D; d += 32) {
    __m512bh xv[TX];
    for (int j = 0; j < TX; ++j) xv[j] = load32(o.x + (m + j) * D + d);
    for (int i = 0; i < TW; ++i) {
      const uint16_t* row = o.w + (f + i) * D + d;
      if constexpr (kPrefetch)
        _mm_prefetch(reinterpret_cast<const char*>(row + TW * D), _MM_HINT_T0);
      const __m512bh wv = load32(row);
      for (int j = 0; j < TX; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv, xv[j]);
    }
  }
  if (d < D) {
    const __mmask32 k = static_cast<__mmask32>((uint64_t{1} << (D - d)) - 1);
    __m512bh xv[TX];
    for (int j = 0; j < TX; ++j) xv[j] = load32(o.x + (m + j) * D + d, k);
    for (int i = 0; i < TW; ++i) {
      const __m512bh wv = load32(o.w + (f + i) * D + d, k);
      for (int j = 0; j < TX; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv, xv[j]);
    }
  }
  store_tile<TW, TX>(o, acc, f, m);
}

// Every input row against TW weight rows. Unlike the fp32 path, every tile prefetches the next
// weight tile, not only the first: faster on the bf16 vocabulary head at 8..32 rows
// (Avx512Linear.DISABLED_ReportThroughput).
template <int TW>
FURLONG_AVX512_BF16 FURLONG_TILE void rows_bf16(const Operands<uint16_t, uint16_t, uint16_t>& o,
                                                int64_t f) {
  static_assert(kTileXBf16 == 4, "the remainder cases below cover 1..3 rows");
  int64_t m = 0;
  for (; m + kTileXBf16 <= o.M; m += kTileXBf16) tile_bf16<TW, kTileXBf16>(o, f, m);
  switch (o.M - m) {
    case 3:
      return tile_bf16<TW, 3>(o, f, m);
    case 2:
      return tile_bf16<TW, 2>(o, f, m);
    case 1:
      return tile_bf16<TW, 1>(o, f, m);
    default:
      return;
  }
}

FURLONG_AVX512_BF16 void slab_bf16(const Operands<uint16_t, uint16_t, uint16_t>& o, int64_t f_begin,
                                   int64_t f_end) {
  int64_t f = f_begin;
  if (o.M == 1) {
    for (; f + kTileW1 <= f_end; f += kTileW1) tile_bf16<kTileW1, 1>(o, f, 0);
  }
  for (; f + kTileW <= f_end; f += kTileW) rows_bf16<kTileW>(o, f);
  for (; f < f_end; ++f) rows_bf16<1>(o, f);
}

// Splits the output rows over the threads in whole weight tiles (at least 16 tiles a task).
template <class Slab>
void parallel_over_rows(int64_t F, const Slab& slab) {
  const int64_t tiles = (F + kTileW - 1) / kTileW;
  at::parallel_for(0, tiles, 16,
                   [&](int64_t t0, int64_t t1) { slab(t0 * kTileW, std::min(F, t1 * kTileW)); });
}

const uint16_t* bf16_bits(const at::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}

}  // namespace

bool avx512_linear_available() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return cpu && !aten_capped_below_avx512();
#else
  return false;
#endif
}

bool avx512_bf16_dot_available() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const bool cpu = __builtin_cpu_supports("avx512bf16");
  return cpu && avx512_linear_available();
#else
  return false;
#endif
}

bool avx512_linear_supported(const at::Tensor& x_MD, const at::Tensor& w_FD) {
  auto fp32_or_bf16 = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16;
  };
  return avx512_linear_available() && x_MD.is_cpu() && w_FD.is_cpu() && x_MD.dim() == 2 &&
         w_FD.dim() == 2 && x_MD.size(1) == w_FD.size(1) && fp32_or_bf16(x_MD) &&
         fp32_or_bf16(w_FD) && w_FD.is_contiguous() && !x_MD.requires_grad() &&
         !w_FD.requires_grad();
}

at::Tensor avx512_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F) {
  FURLONG_ASSERT(avx512_linear_supported(x_MD, w_FD), "avx512_linear: unsupported operands ",
                 x_MD.sizes(), " ", x_MD.scalar_type(), " x ", w_FD.sizes(), " ",
                 w_FD.scalar_type());
  const int64_t M = x_MD.size(0), D = x_MD.size(1), F = w_FD.size(0);
  at::Tensor bias32_F = b_F.defined() ? b_F.to(at::kFloat).contiguous() : at::Tensor();
  const float* bias = bias32_F.defined() ? bias32_F.data_ptr<float>() : nullptr;
  const bool bf16_in = x_MD.scalar_type() == at::kBFloat16;
  if (bf16_in && w_FD.scalar_type() == at::kBFloat16 && avx512_bf16_dot_available()) {
    auto x16_MD = x_MD.contiguous();
    auto y16_MF = at::empty({M, F}, x16_MD.options());
    Operands<uint16_t, uint16_t, uint16_t> o{
        bf16_bits(x16_MD),
        bf16_bits(w_FD),
        reinterpret_cast<uint16_t*>(y16_MF.data_ptr<at::BFloat16>()),
        bias,
        M,
        D,
        F};
    parallel_over_rows(F, [&](int64_t f0, int64_t f1) { slab_bf16(o, f0, f1); });
    return y16_MF;
  }
  auto x32_MD = x_MD.to(at::kFloat).contiguous();
  auto y32_MF = at::empty({M, F}, x32_MD.options());
  const float* x = x32_MD.data_ptr<float>();
  float* y = y32_MF.data_ptr<float>();
  if (w_FD.scalar_type() == at::kFloat) {
    Operands<float, float, float> o{x, w_FD.data_ptr<float>(), y, bias, M, D, F};
    parallel_over_rows(F, [&](int64_t f0, int64_t f1) { slab_f32(o, f0, f1); });
  } else {
    Operands<float, uint16_t, float> o{x, bf16_bits(w_FD), y, bias, M, D, F};
    parallel_over_rows(F, [&](int64_t f0, int64_t f1) { slab_f32(o, f0, f1); });
  }
  return bf16_in ? y32_MF.to(at::kBFloat16) : y32_MF;
}

at::Tensor avx512_grouped_bf16_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                                      const std::vector<int64_t>& rows_G) {
  FURLONG_ASSERT(avx512_bf16_dot_available() && x_AD.scalar_type() == at::kBFloat16 &&
                     !w_G_FD.empty() && w_G_FD.size() == rows_G.size(),
                 "avx512_grouped_bf16_linear: needs AVX512-BF16, bf16 input and one weight per "
                 "row group");
  const int64_t D = x_AD.size(1), F = w_G_FD.front().size(0);
  auto x16_AD = x_AD.contiguous();
  auto y16_AF = at::empty({x_AD.size(0), F}, x16_AD.options());
  const uint16_t* x = bf16_bits(x16_AD);
  auto* y = reinterpret_cast<uint16_t*>(y16_AF.data_ptr<at::BFloat16>());
  std::vector<Operands<uint16_t, uint16_t, uint16_t>> groups;
  int64_t row0 = 0;
  for (size_t g = 0; g < w_G_FD.size(); ++g) {
    const auto& w = w_G_FD[g];
    FURLONG_ASSERT(avx512_linear_supported(x_AD, w) && w.scalar_type() == at::kBFloat16 &&
                       w.sizes() == w_G_FD.front().sizes(),
                   "avx512_grouped_bf16_linear: weight ", g, " is ", w.sizes(), " ",
                   w.scalar_type());
    if (rows_G[g] > 0) {
      groups.push_back({x + row0 * D, bf16_bits(w), y + row0 * F, nullptr, rows_G[g], D, F});
    }
    row0 += rows_G[g];
  }
  FURLONG_ASSERT(row0 == x_AD.size(0), "avx512_grouped_bf16_linear: ", row0,
                 " grouped rows for input ", x_AD.sizes());
  parallel_over_group_tiles(static_cast<int64_t>(groups.size()), F, kTileW,
                            [&](int64_t g, int64_t f0, int64_t f1) {
                              slab_bf16(groups[static_cast<size_t>(g)], f0, f1);
                            });
  return y16_AF;
}

}  // namespace furlong::kernels
