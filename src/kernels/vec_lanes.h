// 16-lane fp32 vectors on GCC vector types for the hand-vectorized CPU kernels (decode
// attention, argmax): each target clone (target_clones.h) compiles them to its own registers,
// one zmm on AVX-512, two ymm on AVX2. Loads widen bf16 exactly; lane_sum adds in a fixed order.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/target_clones.h"

namespace furlong::kernels::lanes {

using F32x16 = float __attribute__((vector_size(64)));
using F32x8 = float __attribute__((vector_size(32)));
using F32x4 = float __attribute__((vector_size(16)));
using I32x16 = int32_t __attribute__((vector_size(64)));
using U16x16 = uint16_t __attribute__((vector_size(32)));
using U32x16 = uint32_t __attribute__((vector_size(64)));

FURLONG_INLINE F32x16 load_lanes(const float* p) {
  F32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// 16 bf16 values (their bits), widened to fp32 exactly.
FURLONG_INLINE F32x16 load_lanes(const uint16_t* p) {
  U16x16 raw;
  std::memcpy(&raw, p, sizeof raw);
  return reinterpret_cast<F32x16>(__builtin_convertvector(raw, U32x16) << 16);
}
// 32 bf16 values (their bits) as two vectors, widened exactly: `even` holds elements 0, 2, .., 30
// and `odd` elements 1, 3, .., 31. One load, a shift and a mask, where load_lanes widens 16
// values with a zero-extension per half: kernels that may permute the elements of a dot product
// or a running sum (decode attention) read bf16 rows this way.
FURLONG_INLINE void load_pairs(const uint16_t* p, F32x16& even, F32x16& odd) {
  U32x16 raw;
  std::memcpy(&raw, p, sizeof raw);
  even = reinterpret_cast<F32x16>(raw << 16);
  odd = reinterpret_cast<F32x16>(raw & 0xFFFF0000u);
}
FURLONG_INLINE void store_lanes(float* p, F32x16 v) {
  std::memcpy(p, &v, sizeof v);
}

// The sum of the 16 lanes, in a fixed order: halves, quarters, then pairs.
FURLONG_INLINE float lane_sum(F32x16 v) {
  const F32x8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const F32x4 q =
      __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (q[0] + q[2]) + (q[1] + q[3]);
}

}  // namespace furlong::kernels::lanes
