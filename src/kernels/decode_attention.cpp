#include "kernels/decode_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "kernels/target_clones.h"
#include "kernels/vec_math.h"

namespace furlong::kernels {
namespace {

FURLONG_INLINE float widen(float v) {
  return v;
}
FURLONG_INLINE float widen(uint16_t v) {
  return bf16_bits_to_float(v);
}

// The softmax weight that multiplies the values: as ATen's CPU flash attention (the trainer's
// SDPA) does, a bf16 attention rounds it to bf16 for the probabilities x values product, while
// the normalizing sum keeps the fp32 weights.
template <class T>
FURLONG_INLINE float weight_for_values(float p) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    return round_bf16(p);
  } else {
    return p;
  }
}

// The raw pointers of one call.
template <class T>
struct Operands {
  const T* q;  // [B, N, H]
  const T* k;  // [S, K, H]
  const T* v;
  T* o;  // [B, N, H]
  const int64_t* slots;
  const int64_t* cu_lens;
  int64_t N, K, H;
  float scale;
};

FURLONG_INLINE void store(float* out, float v) {
  *out = v;
}
FURLONG_INLINE void store(uint16_t* out, float v) {
  *out = float_to_bf16_bits(v);
}

// Sequence b, KV head g: the G query heads n = g * G .. g * G + G - 1. `work` holds G rows of
// H (queries, then outputs) and G rows of L scores.
template <class T>
FURLONG_INLINE void attend_one(const Operands<T>& o, int64_t b, int64_t g,
                               std::vector<float>& work) {
  const int64_t G = o.N / o.K, H = o.H;
  const int64_t begin = o.cu_lens[b], L = o.cu_lens[b + 1] - begin;
  work.resize(static_cast<size_t>(2 * G * H + G * L));
  float* q = work.data();  // [G, H] fp32
  float* acc = q + G * H;  // [G, H]
  float* p = acc + G * H;  // [G, L]
  for (int64_t i = 0; i < G * H; ++i) q[i] = widen(o.q[(b * o.N + g * G) * H + i]);
  for (int64_t l = 0; l < L; ++l) {
    const T* key = o.k + (o.slots[begin + l] * o.K + g) * H;
    for (int64_t j = 0; j < G; ++j) {
      const float* qj = q + j * H;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t h = 0; h < H; ++h) dot += qj[h] * widen(key[h]);
      p[j * L + l] = dot * o.scale;
    }
  }
  float total[64];  // G <= 64 (checked by the caller)
  for (int64_t j = 0; j < G; ++j) {
    float* pj = p + j * L;
    const float top = *std::max_element(pj, pj + L);
    float sum = 0.0f;
    for (int64_t l = 0; l < L; ++l) {
      pj[l] = std::exp(pj[l] - top);
      sum += pj[l];
    }
    total[j] = sum;
  }
  std::fill(acc, acc + G * H, 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    const T* value = o.v + (o.slots[begin + l] * o.K + g) * H;
    for (int64_t j = 0; j < G; ++j) {
      const float pl = weight_for_values<T>(p[j * L + l]);
      float* aj = acc + j * H;
#pragma omp simd
      for (int64_t h = 0; h < H; ++h) aj[h] += pl * widen(value[h]);
    }
  }
  for (int64_t j = 0; j < G; ++j) {
    T* out = o.o + (b * o.N + g * G + j) * H;
    const float inv = 1.0f / total[j];
    for (int64_t h = 0; h < H; ++h) store(out + h, acc[j * H + h] * inv);
  }
}

template <class T>
FURLONG_INLINE void attend_range(const Operands<T>& o, int64_t begin, int64_t end) {
  thread_local std::vector<float> work;
  for (int64_t t = begin; t < end; ++t) attend_one(o, t / o.K, t % o.K, work);
}

FURLONG_KERNEL void attend_range_f32(const Operands<float>& o, int64_t begin, int64_t end) {
  attend_range(o, begin, end);
}
FURLONG_KERNEL void attend_range_bf16(const Operands<uint16_t>& o, int64_t begin, int64_t end) {
  attend_range(o, begin, end);
}

template <class T>
Operands<T> operands(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
                     const at::Tensor& slots, const std::vector<int64_t>& cu, double scale) {
  auto ptr = [](const at::Tensor& t) { return reinterpret_cast<const T*>(t.data_ptr()); };
  return {ptr(q),
          ptr(k),
          ptr(v),
          reinterpret_cast<T*>(out.data_ptr()),
          slots.data_ptr<int64_t>(),
          cu.data(),
          q.size(1),
          k.size(1),
          q.size(2),
          static_cast<float>(scale)};
}

}  // namespace

bool decode_attention_supported(int64_t num_heads, const at::Tensor& k_SKH,
                                const at::Tensor& v_SKH) {
  const auto dtype = k_SKH.scalar_type();
  return k_SKH.is_cpu() && v_SKH.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16) &&
         v_SKH.scalar_type() == dtype && k_SKH.dim() == 3 && v_SKH.sizes() == k_SKH.sizes() &&
         k_SKH.is_contiguous() && v_SKH.is_contiguous() && k_SKH.size(1) > 0 &&
         num_heads % k_SKH.size(1) == 0 && num_heads / k_SKH.size(1) <= 64;
}

at::Tensor decode_attention(const at::Tensor& q_BNH, const at::Tensor& k_SKH,
                            const at::Tensor& v_SKH, const at::Tensor& slots,
                            const std::vector<int64_t>& cu_lens, double scale) {
  FURLONG_ASSERT(q_BNH.dim() == 3 && decode_attention_supported(q_BNH.size(1), k_SKH, v_SKH) &&
                     q_BNH.is_cpu() && q_BNH.scalar_type() == k_SKH.scalar_type() &&
                     q_BNH.size(2) == k_SKH.size(2),
                 "decode_attention: unsupported operands q ", q_BNH.sizes(), " ",
                 q_BNH.scalar_type(), ", k/v ", k_SKH.sizes(), " ", k_SKH.scalar_type());
  const int64_t B = q_BNH.size(0), K = k_SKH.size(1), S = k_SKH.size(0);
  FURLONG_ASSERT(static_cast<int64_t>(cu_lens.size()) == B + 1 && cu_lens[0] == 0 &&
                     slots.is_cpu() && slots.scalar_type() == at::kLong && slots.is_contiguous() &&
                     slots.numel() == cu_lens[B],
                 "decode_attention: slots/cu_lens do not describe ", B, " sequences");
  for (int64_t b = 0; b < B; ++b) {
    FURLONG_ASSERT(cu_lens[b + 1] > cu_lens[b], "decode_attention: sequence ", b,
                   " has no cached keys");
  }
  const int64_t* sl = slots.data_ptr<int64_t>();
  FURLONG_ASSERT(std::all_of(sl, sl + slots.numel(), [&](int64_t s) { return s >= 0 && s < S; }),
                 "decode_attention: a slot is outside the cache's ", S, " slots");
  auto q = q_BNH.contiguous();
  auto out = at::empty_like(q);
  if (q.scalar_type() == at::kFloat) {
    auto o = operands<float>(q, k_SKH, v_SKH, out, slots, cu_lens, scale);
    at::parallel_for(0, B * K, 1, [&](int64_t t0, int64_t t1) { attend_range_f32(o, t0, t1); });
  } else {
    auto o = operands<uint16_t>(q, k_SKH, v_SKH, out, slots, cu_lens, scale);
    at::parallel_for(0, B * K, 1, [&](int64_t t0, int64_t t1) { attend_range_bf16(o, t0, t1); });
  }
  return out;
}

}  // namespace furlong::kernels
