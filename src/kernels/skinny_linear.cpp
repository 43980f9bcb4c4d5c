#include "kernels/skinny_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/group_tiles.h"
#include "kernels/target_clones.h"
#include "kernels/vec_math.h"

namespace furlong::kernels {
namespace {

// 8 fp32 lanes: one ymm register on AVX2 and AVX-512 alike (256-bit FMAs run at full rate on
// both), two xmm registers on baseline x86-64.
typedef float V8 __attribute__((vector_size(32)));
typedef uint16_t V8u16 __attribute__((vector_size(16)));
typedef uint32_t V8u32 __attribute__((vector_size(32)));

constexpr int64_t kLanes = 8;
constexpr int64_t kWeightTile = 4;  // weight rows per register tile
constexpr int64_t kInputTile = 2;   // input rows per register tile: 8 accumulators, 14 registers

FURLONG_INLINE V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// bf16 -> fp32 is exact: the 16 bits become the high half of the fp32 pattern.
FURLONG_INLINE V8 load8(const uint16_t* p) {
  V8u16 h;
  std::memcpy(&h, p, sizeof(h));
  V8u32 wide = __builtin_convertvector(h, V8u32) << 16;
  return (V8)wide;  // a same-size vector cast reinterprets the bits
}

FURLONG_INLINE float load1(const float* p) {
  return *p;
}
FURLONG_INLINE float load1(const uint16_t* p) {
  return bf16_bits_to_float(*p);
}

FURLONG_INLINE float sum_lanes(V8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// y[m][f] for the TW weight rows from f0 and the TX input rows from m0: 8-lane partial sums
// over d, then the lanes and the scalar tail.
template <int TW, int TX, class WT>
FURLONG_INLINE void dot_tile(const float* x_MD, const WT* w_FD, float* y_MF, int64_t f0, int64_t m0,
                             int64_t D, int64_t F) {
  V8 acc[TW][TX];
  for (int i = 0; i < TW; ++i)
    for (int j = 0; j < TX; ++j) acc[i][j] = V8{};
  const int64_t vec_end = D - D % kLanes;
  for (int64_t d = 0; d < vec_end; d += kLanes) {
    V8 xv[TX];
    for (int j = 0; j < TX; ++j) xv[j] = load8(x_MD + (m0 + j) * D + d);
    for (int i = 0; i < TW; ++i) {
      V8 wv = load8(w_FD + (f0 + i) * D + d);
      for (int j = 0; j < TX; ++j) acc[i][j] += wv * xv[j];
    }
  }
  for (int i = 0; i < TW; ++i) {
    for (int j = 0; j < TX; ++j) {
      float tail = 0.0f;
      for (int64_t d = vec_end; d < D; ++d) {
        tail += load1(w_FD + (f0 + i) * D + d) * x_MD[(m0 + j) * D + d];
      }
      y_MF[(m0 + j) * F + f0 + i] = sum_lanes(acc[i][j]) + tail;
    }
  }
}

// One input row: each weight row is one sequential stream, read with four independent
// accumulator chains (32 floats per step), so a thread's slab of rows is read front to back.
template <class WT>
FURLONG_INLINE void single_row(const float* x_D, const WT* w_FD, float* y_F, int64_t D,
                               int64_t f_begin, int64_t f_end) {
  constexpr int64_t kStep = 4 * kLanes;
  const int64_t vec_end = D - D % kStep;
  for (int64_t f = f_begin; f < f_end; ++f) {
    const WT* w = w_FD + f * D;
    V8 a0{}, a1{}, a2{}, a3{};
    for (int64_t d = 0; d < vec_end; d += kStep) {
      a0 += load8(w + d) * load8(x_D + d);
      a1 += load8(w + d + kLanes) * load8(x_D + d + kLanes);
      a2 += load8(w + d + 2 * kLanes) * load8(x_D + d + 2 * kLanes);
      a3 += load8(w + d + 3 * kLanes) * load8(x_D + d + 3 * kLanes);
    }
    float tail = 0.0f;
    for (int64_t d = vec_end; d < D; ++d) tail += load1(w + d) * x_D[d];
    y_F[f] = sum_lanes((a0 + a1) + (a2 + a3)) + tail;
  }
}

// Weight rows [f_begin, f_end) against every input row. The weight tile stays in L1 while all
// input rows pass over it, so the weights are read from memory once per call.
template <class WT>
FURLONG_INLINE void skinny_rows(const float* x_MD, const WT* w_FD, float* y_MF, int64_t M,
                                int64_t D, int64_t F, int64_t f_begin, int64_t f_end) {
  if (M == 1) return single_row(x_MD, w_FD, y_MF, D, f_begin, f_end);
  int64_t f = f_begin;
  for (; f + kWeightTile <= f_end; f += kWeightTile) {
    int64_t m = 0;
    for (; m + kInputTile <= M; m += kInputTile) {
      dot_tile<kWeightTile, kInputTile>(x_MD, w_FD, y_MF, f, m, D, F);
    }
    if (m < M) dot_tile<kWeightTile, 1>(x_MD, w_FD, y_MF, f, m, D, F);
  }
  for (; f < f_end; ++f) {
    for (int64_t m = 0; m < M; ++m) dot_tile<1, 1>(x_MD, w_FD, y_MF, f, m, D, F);
  }
}

FURLONG_KERNEL void skinny_rows_f32(const float* x, const float* w, float* y, int64_t M, int64_t D,
                                    int64_t F, int64_t f0, int64_t f1) {
  skinny_rows(x, w, y, M, D, F, f0, f1);
}
FURLONG_KERNEL void skinny_rows_bf16(const float* x, const uint16_t* w, float* y, int64_t M,
                                     int64_t D, int64_t F, int64_t f0, int64_t f1) {
  skinny_rows(x, w, y, M, D, F, f0, f1);
}

bool float_or_bf16(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16;
}

}  // namespace

bool skinny_linear_supported(const at::Tensor& x_MD, const at::Tensor& w_FD) {
  return x_MD.is_cpu() && w_FD.is_cpu() && x_MD.dim() == 2 && w_FD.dim() == 2 &&
         x_MD.size(1) == w_FD.size(1) && float_or_bf16(x_MD) && float_or_bf16(w_FD) &&
         w_FD.is_contiguous() && !x_MD.requires_grad() && !w_FD.requires_grad();
}

at::Tensor skinny_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F) {
  FURLONG_ASSERT(skinny_linear_supported(x_MD, w_FD), "skinny_linear: unsupported operands ",
                 x_MD.sizes(), " ", x_MD.scalar_type(), " x ", w_FD.sizes(), " ",
                 w_FD.scalar_type());
  const int64_t M = x_MD.size(0), D = x_MD.size(1), F = w_FD.size(0);
  auto x32_MD = x_MD.to(at::kFloat).contiguous();
  auto y32_MF = at::empty({M, F}, x32_MD.options());
  const float* x = x32_MD.data_ptr<float>();
  float* y = y32_MF.data_ptr<float>();
  // Tasks of whole weight tiles, at least 64 rows (a 256 KB fp32 slab at D = 1024).
  const int64_t tiles = (F + kWeightTile - 1) / kWeightTile;
  at::parallel_for(0, tiles, 16, [&](int64_t t0, int64_t t1) {
    const int64_t f0 = t0 * kWeightTile, f1 = std::min(F, t1 * kWeightTile);
    if (w_FD.scalar_type() == at::kFloat) {
      skinny_rows_f32(x, w_FD.data_ptr<float>(), y, M, D, F, f0, f1);
    } else {
      skinny_rows_bf16(x, reinterpret_cast<const uint16_t*>(w_FD.data_ptr<at::BFloat16>()), y, M, D,
                       F, f0, f1);
    }
  });
  if (b_F.defined()) y32_MF.add_(b_F.to(at::kFloat));
  return x_MD.scalar_type() == at::kFloat ? y32_MF : y32_MF.to(x_MD.scalar_type());
}

namespace {

// One row group of grouped_skinny_linear: its weight and its rows of x and y.
struct RowGroup {
  const void* w_FD;
  int64_t row0, rows;
};

}  // namespace

// Tiles start at multiples of kWeightTile here as in skinny_linear (see the header).
at::Tensor grouped_skinny_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                                 const std::vector<int64_t>& rows_G) {
  const int64_t D = x_AD.size(1), F = w_G_FD.front().size(0);
  const bool bf16_weights = w_G_FD.front().scalar_type() == at::kBFloat16;
  auto x32_AD = x_AD.to(at::kFloat).contiguous();
  auto y32_AF = at::empty({x_AD.size(0), F}, x32_AD.options());
  const float* x = x32_AD.data_ptr<float>();
  float* y = y32_AF.data_ptr<float>();
  std::vector<RowGroup> groups;
  int64_t row0 = 0;
  for (size_t g = 0; g < w_G_FD.size(); ++g) {
    if (rows_G[g] > 0) groups.push_back({w_G_FD[g].data_ptr(), row0, rows_G[g]});
    row0 += rows_G[g];
  }
  parallel_over_group_tiles(
      static_cast<int64_t>(groups.size()), F, kWeightTile, [&](int64_t gi, int64_t f0, int64_t f1) {
        const RowGroup& g = groups[static_cast<size_t>(gi)];
        const float* x_g = x + g.row0 * D;
        float* y_g = y + g.row0 * F;
        if (bf16_weights) {
          skinny_rows_bf16(x_g, static_cast<const uint16_t*>(g.w_FD), y_g, g.rows, D, F, f0, f1);
        } else {
          skinny_rows_f32(x_g, static_cast<const float*>(g.w_FD), y_g, g.rows, D, F, f0, f1);
        }
      });
  return x_AD.scalar_type() == at::kFloat ? y32_AF : y32_AF.to(x_AD.scalar_type());
}

}  // namespace furlong::kernels
