#include "kernels/avx2_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/group_tiles.h"

namespace furlong::kernels {
namespace {

#define FURLONG_AVX2 __attribute__((target("avx2,fma")))
#define FURLONG_TILE inline __attribute__((always_inline))

constexpr int kTileW = 4;   // weight rows per register tile
constexpr int kTileX = 3;   // input rows per register tile (12 accumulators)
constexpr int kTileW1 = 8;  // weight rows per tile when there is one input row
constexpr int kLanes = 8;

bool aten_capped_to_baseline() {
  const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
  return cap != nullptr && std::string(cap) == "default";
}

// The operands of one call, as raw pointers.
template <class WT>
struct Operands {
  const float* x;     // [M, D]
  const WT* w;        // [F, D]
  float* y;           // [M, F]
  const float* bias;  // [F] or null
  int64_t M, D, F;
};

// [sum a, sum b, sum c, sum d] of four 8-lane accumulators: pair sums within each 128-bit half
// (two hadds), then the two halves. Every position takes the same additions in the same order
// and positions never mix, so a weight row's sum does not depend on its place in the tile or on
// the other positions (zeros where a tile has fewer than 4 weight rows).
FURLONG_AVX2 FURLONG_TILE __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 sums = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(sums), _mm256_extractf128_ps(sums, 1));
}

FURLONG_AVX2 FURLONG_TILE __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
// bf16 -> fp32 is exact: the 16 bits become the high half of the fp32 pattern.
FURLONG_AVX2 FURLONG_TILE __m256 load8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// The last D % 8 elements of a row, zero-padded to 8 (a zero pair adds exactly nothing).
template <class T>
FURLONG_AVX2 FURLONG_TILE __m256 load_tail(const T* p, int64_t n) {
  alignas(32) T padded[kLanes] = {};
  std::memcpy(padded, p, static_cast<size_t>(n) * sizeof(T));
  return load8(padded);
}

// y[m + j][f + i] = lane sum of acc[i][j] (+ bias[f + i]) for the tile's TW x TX outputs, four
// weight rows at a time.
template <int TW, int TX, class WT>
FURLONG_AVX2 FURLONG_TILE void store_tile(const Operands<WT>& o, __m256 (&acc)[TW][TX], int64_t f,
                                          int64_t m) {
  const __m256 zero = _mm256_setzero_ps();
  // acc[i][j], or zeros past the tile's last weight row (the index stays in bounds).
  auto lanes = [&](int i, int j) { return i < TW ? acc[i < TW ? i : 0][j] : zero; };
  for (int g = 0; g < TW; g += 4) {
    const int n = TW - g < 4 ? TW - g : 4;
    alignas(16) float bias[4] = {};
    for (int i = 0; i < n && o.bias; ++i) bias[i] = o.bias[f + g + i];
    for (int j = 0; j < TX; ++j) {
      alignas(16) float sums[4];
      const __m128 lane_sums =
          reduce4(lanes(g, j), lanes(g + 1, j), lanes(g + 2, j), lanes(g + 3, j));
      _mm_store_ps(sums, _mm_add_ps(lane_sums, _mm_load_ps(bias)));
      float* y = o.y + (m + j) * o.F + f + g;
      for (int i = 0; i < n; ++i) y[i] = sums[i];
    }
  }
}

// The TW x TX tile at weight row f and input row m. Prefetch: also fetch the next weight tile's
// rows into L1 (done by the first input tile of each weight tile).
template <int TW, int TX, bool Prefetch, class WT>
FURLONG_AVX2 FURLONG_TILE void tile(const Operands<WT>& o, int64_t f, int64_t m) {
  __m256 acc[TW][TX];
  for (int i = 0; i < TW; ++i)
    for (int j = 0; j < TX; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t D = o.D, vec_end = D - D % kLanes;
  for (int64_t d = 0; d < vec_end; d += kLanes) {
    __m256 xv[TX];
    for (int j = 0; j < TX; ++j) xv[j] = load8(o.x + (m + j) * D + d);
    for (int i = 0; i < TW; ++i) {
      const WT* row = o.w + (f + i) * D + d;
      if constexpr (Prefetch)
        _mm_prefetch(reinterpret_cast<const char*>(row + TW * D), _MM_HINT_T0);
      const __m256 wv = load8(row);
      for (int j = 0; j < TX; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  if (vec_end < D) {
    const int64_t n = D - vec_end;
    __m256 xv[TX];
    for (int j = 0; j < TX; ++j) xv[j] = load_tail(o.x + (m + j) * D + vec_end, n);
    for (int i = 0; i < TW; ++i) {
      const __m256 wv = load_tail(o.w + (f + i) * D + vec_end, n);
      for (int j = 0; j < TX; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  store_tile<TW, TX>(o, acc, f, m);
}

// Every input row against TW weight rows: whole kTileX tiles, then the remainder.
template <int TW, class WT>
FURLONG_AVX2 FURLONG_TILE void rows(const Operands<WT>& o, int64_t f) {
  static_assert(kTileX == 3, "the remainder cases below cover 1..2 rows");
  int64_t m = 0;
  if (o.M >= kTileX) {
    tile<TW, kTileX, true>(o, f, 0);
    m = kTileX;
  }
  for (; m + kTileX <= o.M; m += kTileX) tile<TW, kTileX, false>(o, f, m);
  const bool first = m == 0;
  switch (o.M - m) {
    case 2:
      return first ? tile<TW, 2, true>(o, f, m) : tile<TW, 2, false>(o, f, m);
    case 1:
      return first ? tile<TW, 1, true>(o, f, m) : tile<TW, 1, false>(o, f, m);
    default:
      return;
  }
}

// One input row: kTileW1 weight rows per tile, so that as many independent FMA chains hide the
// FMA latency (a tile of 4 would leave the two FMA pipes waiting half the time). No software
// prefetch here: 8 sequential row streams are what the hardware prefetcher follows best, and
// prefetching the next 8 rows into L1 (96 KB at D = 3072) overflows it and was slower; from 2
// rows on, prefetching is faster (Avx2Linear.DISABLED_ReportThroughput).
template <class WT>
FURLONG_AVX2 void slab(const Operands<WT>& o, int64_t f_begin, int64_t f_end) {
  int64_t f = f_begin;
  if (o.M == 1) {
    for (; f + kTileW1 <= f_end; f += kTileW1) tile<kTileW1, 1, false>(o, f, 0);
  }
  for (; f + kTileW <= f_end; f += kTileW) rows<kTileW>(o, f);
  for (; f < f_end; ++f) rows<1>(o, f);
}

// Splits the output rows over the threads in whole weight tiles (at least 16 tiles a task).
template <class Slab>
void parallel_over_rows(int64_t F, const Slab& slab_fn) {
  const int64_t tiles = (F + kTileW - 1) / kTileW;
  at::parallel_for(0, tiles, 16,
                   [&](int64_t t0, int64_t t1) { slab_fn(t0 * kTileW, std::min(F, t1 * kTileW)); });
}

}  // namespace

bool avx2_linear_available() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return cpu && !aten_capped_to_baseline();
#else
  return false;
#endif
}

bool avx2_linear_supported(const at::Tensor& x_MD, const at::Tensor& w_FD) {
  const bool weight_dtype = w_FD.scalar_type() == at::kFloat || w_FD.scalar_type() == at::kBFloat16;
  return avx2_linear_available() && x_MD.is_cpu() && w_FD.is_cpu() && x_MD.dim() == 2 &&
         w_FD.dim() == 2 && x_MD.size(1) == w_FD.size(1) && x_MD.scalar_type() == at::kFloat &&
         weight_dtype && w_FD.is_contiguous() && !x_MD.requires_grad() && !w_FD.requires_grad();
}

at::Tensor avx2_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F) {
  FURLONG_ASSERT(avx2_linear_supported(x_MD, w_FD), "avx2_linear: unsupported operands ",
                 x_MD.sizes(), " ", x_MD.scalar_type(), " x ", w_FD.sizes(), " ",
                 w_FD.scalar_type());
  const int64_t M = x_MD.size(0), D = x_MD.size(1), F = w_FD.size(0);
  at::Tensor bias32_F = b_F.defined() ? b_F.to(at::kFloat).contiguous() : at::Tensor();
  const float* bias = bias32_F.defined() ? bias32_F.data_ptr<float>() : nullptr;
  auto x32_MD = x_MD.contiguous();
  auto y32_MF = at::empty({M, F}, x32_MD.options());
  const float* x = x32_MD.data_ptr<float>();
  float* y = y32_MF.data_ptr<float>();
  if (w_FD.scalar_type() == at::kFloat) {
    Operands<float> o{x, w_FD.data_ptr<float>(), y, bias, M, D, F};
    parallel_over_rows(F, [&](int64_t f0, int64_t f1) { slab(o, f0, f1); });
  } else {
    const auto* w = reinterpret_cast<const uint16_t*>(w_FD.data_ptr<at::BFloat16>());
    Operands<uint16_t> o{x, w, y, bias, M, D, F};
    parallel_over_rows(F, [&](int64_t f0, int64_t f1) { slab(o, f0, f1); });
  }
  return y32_MF;
}

namespace {

template <class WT>
void grouped(const float* x, float* y, const std::vector<at::Tensor>& w_G_FD,
             const std::vector<int64_t>& rows_G, int64_t D, int64_t F) {
  std::vector<Operands<WT>> groups;
  int64_t row0 = 0;
  for (size_t g = 0; g < w_G_FD.size(); ++g) {
    if (rows_G[g] > 0) {
      const auto* w = static_cast<const WT*>(w_G_FD[g].data_ptr());
      groups.push_back({x + row0 * D, w, y + row0 * F, nullptr, rows_G[g], D, F});
    }
    row0 += rows_G[g];
  }
  parallel_over_group_tiles(
      static_cast<int64_t>(groups.size()), F, kTileW,
      [&](int64_t g, int64_t f0, int64_t f1) { slab(groups[static_cast<size_t>(g)], f0, f1); });
}

}  // namespace

at::Tensor avx2_grouped_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                               const std::vector<int64_t>& rows_G) {
  FURLONG_ASSERT(!w_G_FD.empty() && w_G_FD.size() == rows_G.size(),
                 "avx2_grouped_linear: needs one weight per row group");
  int64_t total = 0;
  for (size_t g = 0; g < w_G_FD.size(); ++g) {
    const auto& w = w_G_FD[g];
    FURLONG_ASSERT(avx2_linear_supported(x_AD, w) && w.sizes() == w_G_FD.front().sizes() &&
                       w.scalar_type() == w_G_FD.front().scalar_type(),
                   "avx2_grouped_linear: weight ", g, " is ", w.sizes(), " ", w.scalar_type(),
                   " for input ", x_AD.sizes(), " ", x_AD.scalar_type());
    total += rows_G[g];
  }
  FURLONG_ASSERT(total == x_AD.size(0), "avx2_grouped_linear: ", total, " grouped rows for input ",
                 x_AD.sizes());
  const int64_t D = x_AD.size(1), F = w_G_FD.front().size(0);
  auto x32_AD = x_AD.contiguous();
  auto y32_AF = at::empty({x_AD.size(0), F}, x32_AD.options());
  const float* x = x32_AD.data_ptr<float>();
  float* y = y32_AF.data_ptr<float>();
  if (w_G_FD.front().scalar_type() == at::kFloat) {
    grouped<float>(x, y, w_G_FD, rows_G, D, F);
  } else {
    grouped<uint16_t>(x, y, w_G_FD, rows_G, D, F);
  }
  return y32_AF;
}

}  // namespace furlong::kernels
