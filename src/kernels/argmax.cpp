#include "kernels/argmax.h"

#include <c10/util/BFloat16.h>

#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/target_clones.h"
#include "kernels/vec_lanes.h"

namespace furlong::kernels {
namespace {

using lanes::F32x16;
using lanes::I32x16;
using lanes::load_lanes;
constexpr int64_t kLanes = 16;

FURLONG_INLINE float widen(float x) {
  return x;
}
FURLONG_INLINE float widen(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

FURLONG_INLINE bool any_lane(I32x16 mask) {
  int32_t acc = 0;
  for (int i = 0; i < kLanes; ++i) acc |= mask[i];
  return acc != 0;
}

// Pass 1: the maximum over the row ignoring NaN, and whether a NaN was seen. Pass 2: the first
// index holding the maximum (or the first NaN). Every pass visits elements in index order
// within a lane, but only the value of the maximum matters, which does not depend on order.
template <class T>
FURLONG_INLINE int64_t argmax_impl(const T* z, int64_t V) {
  const int64_t vec_end = V - V % kLanes;
  F32x16 max_v = F32x16{} - std::numeric_limits<float>::infinity();
  I32x16 nan_seen = I32x16{};
  for (int64_t i = 0; i < vec_end; i += kLanes) {
    const F32x16 v = load_lanes(z + i);
    max_v = v > max_v ? v : max_v;  // NaN compares false and leaves max_v alone
    nan_seen |= (v != v);
  }
  float max = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < kLanes; ++i) max = max_v[i] > max ? max_v[i] : max;
  bool nan = any_lane(nan_seen);
  for (int64_t i = vec_end; i < V; ++i) {
    const float x = widen(z[i]);
    nan = nan || x != x;
    max = x > max ? x : max;
  }
  for (int64_t i = 0; i < vec_end; i += kLanes) {
    const F32x16 v = load_lanes(z + i);
    const I32x16 hit = nan ? (v != v) : (v == max);
    if (!any_lane(hit)) continue;
    for (int j = 0; j < kLanes; ++j)
      if (hit[j]) return i + j;
  }
  for (int64_t i = vec_end; i < V; ++i) {
    const float x = widen(z[i]);
    if (nan ? x != x : x == max) return i;
  }
  return 0;  // unreachable: the maximum (or a NaN) is in the row
}

FURLONG_KERNEL int64_t argmax_f32(const float* z, int64_t V) {
  return argmax_impl(z, V);
}
FURLONG_KERNEL int64_t argmax_bf16(const uint16_t* z, int64_t V) {
  return argmax_impl(z, V);
}

}  // namespace

bool argmax_row_supported(const at::Tensor& row_V) {
  return row_V.defined() && row_V.is_cpu() && row_V.dim() == 1 && row_V.numel() > 0 &&
         row_V.is_contiguous() &&
         (row_V.scalar_type() == at::kFloat || row_V.scalar_type() == at::kBFloat16);
}

int64_t argmax_row(const at::Tensor& row_V) {
  FURLONG_ASSERT(argmax_row_supported(row_V),
                 "argmax_row: expects a non-empty contiguous fp32 or bf16 CPU row");
  const int64_t V = row_V.numel();
  if (row_V.scalar_type() == at::kFloat) return argmax_f32(row_V.data_ptr<float>(), V);
  return argmax_bf16(reinterpret_cast<const uint16_t*>(row_V.data_ptr<at::BFloat16>()), V);
}

}  // namespace furlong::kernels
