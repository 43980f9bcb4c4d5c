#include "kernels/skinny_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <c10/core/GradMode.h>

#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/avx2_linear.h"
#include "kernels/avx512_linear.h"
#include "kernels/group_tiles.h"
#include "kernels/packed_linear.h"
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

// skinny_linear over row groups in one parallel_for over (group, weight tile): every output
// element is computed by the same tile routine, over the same tiles, as skinny_linear on the
// group's rows alone (tiles start at multiples of kWeightTile in both), so results are equal.
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

}  // namespace

}  // namespace furlong::kernels

namespace furlong::kernels {

namespace {

// inference_linear's thresholds. Small weights (an MoE expert's projections, a few tokens each
// at decode): oneDNN's fixed cost per call outweighs the GEMM, and the skinny kernels have none.
constexpr int64_t kSkinnyMaxRows = 16, kHeadMinRows = 32768, kSmallWeight = int64_t{1} << 20;
constexpr int64_t kBf16HeadMaxRows = 32, kBf16AmxMaxRows = 7, kFp32DenseMaxRows = 64;
constexpr int64_t kAvx2DenseMaxRows = 64, kAvx2HeadMaxRows = 256;

}  // namespace

bool inference_linear_takes_skinny(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD) {
  // A bf16 vocabulary head at 2..16 rows goes to oneDNN where the CPU computes bf16 natively
  // (AVX512-BF16, AMX: Qwen3-0.6B bf16 decode at batch 16, 64 -> 78 tokens/s); without native
  // bf16, oneDNN emulates it and the skinny kernel, which widens the weight once, is faster.
  const bool native_bf16_head = x_like.scalar_type() == at::kBFloat16 &&
                                w_FD.scalar_type() == at::kBFloat16 && x_like.is_cpu() &&
                                has_native_bf16(c10::Device(c10::kCPU));
  // Dense weights at 2..16 rows on CPUs without AVX-512 (which avx512_linear takes), where
  // avx2_linear does not take them (bf16 inputs): skinny's 8-lane tiles stream the weight once,
  // where oneDNN's AVX2 GEMM re-reads it (an AVX2-only EPYC, 2 threads, [3072, 1024] fp32: 1.22
  // ms against 1.97 ms at 8 rows, 2.0 against 2.35 at 16, level at 32;
  // SkinnyLinear.DISABLED_ReportThroughput).
  const bool dense_without_avx512 =
      !avx512_linear_available() && x_like.is_cpu() &&
      (x_like.scalar_type() == at::kFloat || !has_native_bf16(c10::Device(c10::kCPU)));
  const bool skinny_shape = x_like.dim() == 2 && w_FD.dim() == 2 &&
                            (rows == 1 || (rows <= kSkinnyMaxRows &&
                                           ((w_FD.size(0) >= kHeadMinRows && !native_bf16_head) ||
                                            w_FD.numel() < kSmallWeight || dense_without_avx512)));
  return skinny_shape && skinny_linear_supported(x_like, w_FD);
}

bool inference_linear_takes_avx2(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD) {
  // fp32 inputs against weights of 1M elements and more on CPUs with AVX2 but not AVX-512
  // (where avx512_linear takes them): dense weights at 1..64 rows, a vocabulary head at 1..256.
  // A Xeon (Emerald Rapids) with every library capped at AVX2, 2 threads, against oneDNN / MKL
  // (capped) and skinny_linear (its AVX-512 clone): [3072, 1024] at 8 rows 0.63 ms against 0.93 and
  // 0.81, at 32 rows 1.59 against 1.88 and 1.98; the head at 32 rows 77 ms against 91 and 97, at
  // 256 rows 543 against 555 (MKL) and 681; one row level with MKL's gemv and 1.2x skinny_linear;
  // dense weights level with oneDNN from 128 rows (Avx2Linear.DISABLED_ReportThroughput).
  if (rows < 1 || w_FD.dim() != 2 || w_FD.numel() < kSmallWeight || avx512_linear_available())
    return false;
  const int64_t max_rows = w_FD.size(0) >= kHeadMinRows ? kAvx2HeadMaxRows : kAvx2DenseMaxRows;
  return rows <= max_rows && avx2_linear_supported(x_like, w_FD);
}

bool inference_linear_takes_bf16_dot(int64_t rows, const at::Tensor& x_like,
                                     const at::Tensor& w_FD) {
  // Small bf16 weights (an MoE expert's projections) at a few rows, where the CPU has bf16 dot
  // products: vdpbf16ps does two products per lane per instruction on bf16 operands as stored,
  // where the skinny kernel widens both to fp32 (qwen3_moe_small bf16 decode at batch 32,
  // alternating runs: about 410 -> 560 tokens/s).
  return rows <= kSkinnyMaxRows && x_like.scalar_type() == at::kBFloat16 &&
         w_FD.scalar_type() == at::kBFloat16 && w_FD.dim() == 2 && w_FD.numel() < kSmallWeight &&
         avx512_bf16_dot_available() && avx512_linear_supported(x_like, w_FD);
}

bool inference_linear_takes_avx512(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD) {
  // Dense weights at 2..16 rows (fp32: 2..64) and a vocabulary head at more (Qwen3-0.6B
  // shapes, 2 threads, Zen 4, against oneDNN / MKL: 1.3-2x faster at 4..16 rows; fp32 dense
  // 1.05-1.2x at 32 and 64 rows; the fp32 head 1.4-2x at 4..256 rows; the bf16 head level from
  // 32 rows, and bf16 dense weights slower from 32).
  if (rows < 1 || w_FD.dim() != 2 || w_FD.numel() < kSmallWeight) return false;
  const bool fp32 = x_like.scalar_type() == at::kFloat && w_FD.scalar_type() == at::kFloat;
  const bool bf16_dot = x_like.scalar_type() == at::kBFloat16 &&
                        w_FD.scalar_type() == at::kBFloat16 && avx512_bf16_dot_available();
  // One fp32 row too: level with skinny_linear on Zen 4, 1.2x faster on Emerald Rapids (2
  // threads, [3072, 1024] 0.38 against 0.47 ms, the head 20 against 25 ms), and a row then gets
  // the same bits at every batch size from 1 to 64. One bf16 row: here, where it needs no fp32
  // copy of the input and no rounding pass over the output (two ATen ops in skinny_linear).
  if (!fp32 && !bf16_dot) return false;
  const bool head = w_FD.size(0) >= kHeadMinRows;
  // bf16 on AMX CPUs: oneDNN's AMX GEMM overtakes the dot products from 7-8 rows (Emerald
  // Rapids, 2 threads, [3072, 1024] at 8 rows 0.33 ms both, at 16 rows 0.41 against 0.65; the
  // bf16 head at 8 rows 18.3 against 20.2 ms, at 32 rows 20 against 61).
  const int64_t bf16_max_rows =
      cpu_has_amx_bf16() ? kBf16AmxMaxRows : (head ? kBf16HeadMaxRows : kSkinnyMaxRows);
  const int64_t max_rows =
      fp32 ? (head ? std::numeric_limits<int64_t>::max() : kFp32DenseMaxRows) : bf16_max_rows;
  return rows <= max_rows && avx512_linear_supported(x_like, w_FD);
}

at::Tensor inference_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F) {
  constexpr int64_t kOneDnnMaxWeight = int64_t{1} << 25;
  const int64_t rows = x_MD.dim() == 2 ? x_MD.size(0) : 0;
  if (inference_linear_takes_bf16_dot(rows, x_MD, w_FD) ||
      inference_linear_takes_avx512(rows, x_MD, w_FD)) {
    return avx512_linear(x_MD, w_FD, b_F);
  }
  if (inference_linear_takes_avx2(rows, x_MD, w_FD)) return avx2_linear(x_MD, w_FD, b_F);
  if (inference_linear_takes_skinny(rows, x_MD, w_FD)) {
    return skinny_linear(x_MD, w_FD, b_F);
  }
  const bool cpu_fp32 = x_MD.is_cpu() && x_MD.dim() == 2 && w_FD.dim() == 2 &&
                        x_MD.scalar_type() == at::kFloat && w_FD.scalar_type() == at::kFloat;
  if (!cpu_fp32) return at::linear(x_MD, w_FD, b_F);
  if (w_FD.numel() > kOneDnnMaxWeight) {
    // A vocabulary-sized weight as MKL's A operand, W x^T, which MKL blocks as it streams it
    // (1.1-1.4x faster than x W^T at 16-128 rows), then transposed back.
    auto y_MF = at::mm(w_FD, x_MD.t()).t().contiguous();
    return b_F.defined() ? y_MF.add_(b_F) : y_MF;
  }
  if (!onednn_linear_available() || at::GradMode::is_enabled()) {
    return at::linear(x_MD, w_FD, b_F);
  }
  return onednn_linear(x_MD.contiguous(), w_FD.contiguous(), b_F);
}

at::Tensor grouped_inference_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                                    const std::vector<int64_t>& rows_G) {
  FURLONG_ASSERT(!w_G_FD.empty() && w_G_FD.size() == rows_G.size(),
                 "grouped_inference_linear: ", w_G_FD.size(), " weights for ", rows_G.size(),
                 " row groups");
  int64_t total_rows = 0;
  bool any_bf16_dot = false, any_avx2 = false, any_skinny = false;
  for (size_t g = 0; g < w_G_FD.size(); ++g) {
    const auto& w = w_G_FD[g];
    FURLONG_ASSERT(
        w.sizes() == w_G_FD.front().sizes() && w.scalar_type() == w_G_FD.front().scalar_type(),
        "grouped_inference_linear: weight ", g, " is ", w.sizes(), " ", w.scalar_type(),
        ", weight 0 ", w_G_FD.front().sizes(), " ", w_G_FD.front().scalar_type());
    if (rows_G[g] == 0) continue;
    if (inference_linear_takes_bf16_dot(rows_G[g], x_AD, w)) {
      any_bf16_dot = true;
    } else if (inference_linear_takes_avx2(rows_G[g], x_AD, w)) {
      any_avx2 = true;
    } else if (inference_linear_takes_skinny(rows_G[g], x_AD, w)) {
      any_skinny = true;
    } else {
      return {};
    }
    total_rows += rows_G[g];
  }
  FURLONG_ASSERT(x_AD.dim() == 2 && total_rows == x_AD.size(0),
                 "grouped_inference_linear: ", total_rows, " grouped rows for input ",
                 x_AD.sizes());
  // Groups that inference_linear would split between kernels: the caller's loop does that.
  if (int{any_bf16_dot} + int{any_avx2} + int{any_skinny} > 1) return {};
  if (any_bf16_dot) return avx512_grouped_bf16_linear(x_AD, w_G_FD, rows_G);
  return any_avx2 ? avx2_grouped_linear(x_AD, w_G_FD, rows_G)
                  : grouped_skinny_linear(x_AD, w_G_FD, rows_G);
}

}  // namespace furlong::kernels
