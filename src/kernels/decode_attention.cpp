#include "kernels/decode_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "kernels/target_clones.h"
#include "kernels/vec_lanes.h"
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
  int64_t slot_stride, head_stride;  // elements between the K/V rows of adjacent slots, heads
  float scale;
};

FURLONG_INLINE void store(float* out, float v) {
  *out = v;
}
FURLONG_INLINE void store(uint16_t* out, float v) {
  *out = float_to_bf16_bits(v);
}

// Rows of G x L scores to exp(s - max) in place (fast_exp, vectorized: within 2 u of e^x);
// total[j] = the fp32 sum of row j, in order.
FURLONG_INLINE void softmax_rows(float* p, int64_t G, int64_t L, float* total) {
  for (int64_t j = 0; j < G; ++j) {
    float* pj = p + j * L;
    const float top = *std::max_element(pj, pj + L);
#pragma omp simd
    for (int64_t l = 0; l < L; ++l) pj[l] = fast_exp(pj[l] - top);
    float sum = 0.0f;
    for (int64_t l = 0; l < L; ++l) sum += pj[l];
    total[j] = sum;
  }
}

// o[b, g * G + j] = acc[j] / total[j], rounded once to T.
template <class T>
FURLONG_INLINE void store_outputs(const Operands<T>& o, int64_t b, int64_t g, const float* acc,
                                  const float* total) {
  const int64_t G = o.N / o.K, H = o.H;
  for (int64_t j = 0; j < G; ++j) {
    T* out = o.o + (b * o.N + g * G + j) * H;
    const float inv = 1.0f / total[j];
    for (int64_t h = 0; h < H; ++h) store(out + h, acc[j * H + h] * inv);
  }
}

// The scratch of sequence b, KV head g in `work`: its G query rows widened to fp32 ([G, H]),
// then G output accumulators ([G, H]) and G rows of L scores ([G, L]).
struct HeadWork {
  float* q;
  float* acc;
  float* p;
};
template <class T>
FURLONG_INLINE HeadWork head_work(const Operands<T>& o, int64_t b, int64_t g, int64_t H, int64_t L,
                                  std::vector<float>& work) {
  const int64_t G = o.N / o.K;
  work.resize(static_cast<size_t>(2 * G * H + G * L));
  float* q = work.data();
  for (int64_t i = 0; i < G * H; ++i) q[i] = widen(o.q[(b * o.N + g * G) * H + i]);
  return {q, q + G * H, q + 2 * G * H};
}

// Sequence b, KV head g: the G query heads n = g * G .. g * G + G - 1. `work` holds G rows of
// H (queries, then outputs) and G rows of L scores.
template <class T>
FURLONG_INLINE void attend_one(const Operands<T>& o, int64_t b, int64_t g,
                               std::vector<float>& work) {
  const int64_t G = o.N / o.K, H = o.H;
  const int64_t begin = o.cu_lens[b], L = o.cu_lens[b + 1] - begin;
  auto [q, acc, p] = head_work(o, b, g, H, L, work);
  for (int64_t l = 0; l < L; ++l) {
    const T* key = o.k + o.slots[begin + l] * o.slot_stride + g * o.head_stride;
    for (int64_t j = 0; j < G; ++j) {
      const float* qj = q + j * H;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t h = 0; h < H; ++h) dot += qj[h] * widen(key[h]);
      p[j * L + l] = dot * o.scale;
    }
  }
  float total[64];  // G <= 64 (checked by the caller)
  softmax_rows(p, G, L, total);
  std::fill(acc, acc + G * H, 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    const T* value = o.v + o.slots[begin + l] * o.slot_stride + g * o.head_stride;
    for (int64_t j = 0; j < G; ++j) {
      const float pl = weight_for_values<T>(p[j * L + l]);
      float* aj = acc + j * H;
#pragma omp simd
      for (int64_t h = 0; h < H; ++h) aj[h] += pl * widen(value[h]);
    }
  }
  store_outputs(o, b, g, acc, total);
}

// ---- The fp32 vector path: head dims of 64, 128 or 256 (C = H / 16 chunks of 16 lanes) ----
// GCC vector types, so each target clone compiles them to its own registers (AVX-512: one zmm
// per chunk; AVX2: two ymm). Per key, the key row is loaded once for the G query heads that
// share it; each score is two interleaved chunk accumulators and a fixed lane-sum tree. The value
// pass sums p_l v_l in order over l, two query heads at a time in registers. Rows 12 keys ahead
// are prefetched: a layer's cache is read from memory, and its rows of one sequence are only
// adjacent within a block (the engine's head-major cache) or not at all (a contiguous one).

using lanes::F32x16;
using lanes::lane_sum;
using lanes::load_lanes;
using lanes::load_pairs;
using lanes::store_lanes;

constexpr int64_t kPrefetchAhead = 12;  // keys

template <class T>
FURLONG_INLINE void prefetch_row(const T* row, int64_t H) {
  const auto* bytes = reinterpret_cast<const char*>(row);
  for (int64_t off = 0; off < H * static_cast<int64_t>(sizeof(T)); off += 64)
    __builtin_prefetch(bytes + off, 0, 3);
}

template <int C, class T>
FURLONG_INLINE void attend_one_lanes(const Operands<T>& o, int64_t b, int64_t g,
                                     std::vector<float>& work) {
  constexpr int64_t H = 16 * C;
  const int64_t G = o.N / o.K;
  const int64_t begin = o.cu_lens[b], L = o.cu_lens[b + 1] - begin;
  auto [q, acc, p] = head_work(o, b, g, H, L, work);
  auto row = [&](const T* base, int64_t l) {
    return base + o.slots[begin + l] * o.slot_stride + g * o.head_stride;
  };
  for (int64_t l = 0; l < L; ++l) {
    if (l + kPrefetchAhead < L) prefetch_row(row(o.k, l + kPrefetchAhead), H);
    const T* key = row(o.k, l);
    F32x16 kc[C];
    for (int c = 0; c < C; ++c) kc[c] = load_lanes(key + 16 * c);
    for (int64_t j = 0; j < G; ++j) {
      const float* qj = q + j * H;
      F32x16 even = load_lanes(qj) * kc[0], odd = load_lanes(qj + 16) * kc[1];
      for (int c = 2; c < C; c += 2) {
        even += load_lanes(qj + 16 * c) * kc[c];
        odd += load_lanes(qj + 16 * (c + 1)) * kc[c + 1];
      }
      p[j * L + l] = lane_sum(even + odd) * o.scale;
    }
  }
  float total[64];  // G <= 64 (checked by the caller)
  softmax_rows(p, G, L, total);
  // Two query heads at a time, their sums in registers (a lone last head pairs with zeros).
  for (int64_t j0 = 0; j0 < G; j0 += 2) {
    const bool pair = j0 + 1 < G;
    F32x16 sum0[C], sum1[C];
    for (int c = 0; c < C; ++c) sum0[c] = sum1[c] = F32x16{};
    for (int64_t l = 0; l < L; ++l) {
      if (j0 == 0 && l + kPrefetchAhead < L) prefetch_row(row(o.v, l + kPrefetchAhead), H);
      const T* value = row(o.v, l);
      const float w0 = weight_for_values<T>(p[j0 * L + l]);
      const float w1 = pair ? weight_for_values<T>(p[(j0 + 1) * L + l]) : 0.0f;
      for (int c = 0; c < C; ++c) {
        const F32x16 vc = load_lanes(value + 16 * c);
        sum0[c] += w0 * vc;
        sum1[c] += w1 * vc;
      }
    }
    for (int c = 0; c < C; ++c) {
      store_lanes(acc + j0 * H + 16 * c, sum0[c]);
      if (pair) store_lanes(acc + (j0 + 1) * H + 16 * c, sum1[c]);
    }
  }
  store_outputs(o, b, g, acc, total);
}

// ---- bf16 rows as pairs of vectors: head dims of 64, 128 or 256 (P = H / 32) ----
// lanes::load_pairs reads 32 bf16 values as their even and their odd elements, with one load,
// a shift and a mask, where load_lanes widens 16 with two zero-extensions and an insert. The
// queries are widened into the same order once, so each score is the same H products summed in
// another order (an even and an odd chain, then the fixed lane sum: within the same bound), and
// each output element is still the in-order sum over l of w_l v_lh, put back in element order
// at the end. Faster than attend_one_lanes on bf16, most with the rows in cache
// (DecodeAttention.DISABLED_ReportThroughput).

// Writes the P even/odd vector pairs of one row back in element order: out[32c + 2i] = even[c][i],
// out[32c + 2i + 1] = odd[c][i].
template <int P>
FURLONG_INLINE void store_unpaired(float* out, const F32x16 (&even)[P], const F32x16 (&odd)[P]) {
  for (int c = 0; c < P; ++c) {
    store_lanes(out + 32 * c, __builtin_shufflevector(even[c], odd[c], 0, 16, 1, 17, 2, 18, 3, 19,
                                                      4, 20, 5, 21, 6, 22, 7, 23));
    store_lanes(out + 32 * c + 16, __builtin_shufflevector(even[c], odd[c], 8, 24, 9, 25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31));
  }
}

template <int P>
FURLONG_INLINE void attend_one_pairs(const Operands<uint16_t>& o, int64_t b, int64_t g,
                                     std::vector<float>& work) {
  constexpr int64_t H = 32 * P;
  const int64_t G = o.N / o.K;
  const int64_t begin = o.cu_lens[b], L = o.cu_lens[b + 1] - begin;
  work.resize(static_cast<size_t>(2 * G * H + G * L));
  float* q = work.data();  // [G, H]: each 32 elements as (even, odd)
  float* acc = q + G * H;  // [G, H] in element order
  float* p = acc + G * H;  // [G, L]
  const uint16_t* q_rows = o.q + (b * o.N + g * G) * H;
  for (int64_t i = 0; i < G * H; i += 32) {
    F32x16 even, odd;
    load_pairs(q_rows + i, even, odd);
    store_lanes(q + i, even);
    store_lanes(q + i + 16, odd);
  }
  const int64_t* slots = o.slots + begin;
  const uint16_t* k_head = o.k + g * o.head_stride;
  const uint16_t* v_head = o.v + g * o.head_stride;
  for (int64_t l = 0; l < L; ++l) {
    if (l + kPrefetchAhead < L) prefetch_row(k_head + slots[l + kPrefetchAhead] * o.slot_stride, H);
    const uint16_t* key = k_head + slots[l] * o.slot_stride;
    F32x16 k_even[P], k_odd[P];
    for (int c = 0; c < P; ++c) load_pairs(key + 32 * c, k_even[c], k_odd[c]);
    for (int64_t j = 0; j < G; ++j) {
      const float* qj = q + j * H;
      F32x16 even = load_lanes(qj) * k_even[0], odd = load_lanes(qj + 16) * k_odd[0];
      for (int c = 1; c < P; ++c) {
        even += load_lanes(qj + 32 * c) * k_even[c];
        odd += load_lanes(qj + 32 * c + 16) * k_odd[c];
      }
      p[j * L + l] = lane_sum(even + odd) * o.scale;
    }
  }
  float total[64];  // G <= 64 (checked by the caller)
  softmax_rows(p, G, L, total);
  // Two query heads at a time, their sums in registers (a lone last head pairs with zeros).
  for (int64_t j0 = 0; j0 < G; j0 += 2) {
    const bool pair = j0 + 1 < G;
    F32x16 even0[P], odd0[P], even1[P], odd1[P];
    for (int c = 0; c < P; ++c) even0[c] = odd0[c] = even1[c] = odd1[c] = F32x16{};
    for (int64_t l = 0; l < L; ++l) {
      if (j0 == 0 && l + kPrefetchAhead < L)
        prefetch_row(v_head + slots[l + kPrefetchAhead] * o.slot_stride, H);
      const uint16_t* value = v_head + slots[l] * o.slot_stride;
      const float w0 = weight_for_values<uint16_t>(p[j0 * L + l]);
      const float w1 = pair ? weight_for_values<uint16_t>(p[(j0 + 1) * L + l]) : 0.0f;
      for (int c = 0; c < P; ++c) {
        F32x16 v_even, v_odd;
        load_pairs(value + 32 * c, v_even, v_odd);
        even0[c] += w0 * v_even;
        odd0[c] += w0 * v_odd;
        even1[c] += w1 * v_even;
        odd1[c] += w1 * v_odd;
      }
    }
    store_unpaired<P>(acc + j0 * H, even0, odd0);
    if (pair) store_unpaired<P>(acc + (j0 + 1) * H, even1, odd1);
  }
  store_outputs(o, b, g, acc, total);
}

// One (sequence, KV head): the vector path where the head dim allows it (bf16 as pairs), else
// the plain loops.
template <class T>
FURLONG_INLINE void attend_any(const Operands<T>& o, int64_t b, int64_t g,
                               std::vector<float>& work) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    switch (o.H) {
      case 64:
        return attend_one_pairs<2>(o, b, g, work);
      case 128:
        return attend_one_pairs<4>(o, b, g, work);
      case 256:
        return attend_one_pairs<8>(o, b, g, work);
      default:
        return attend_one(o, b, g, work);
    }
  } else {
    switch (o.H) {
      case 64:
        return attend_one_lanes<4>(o, b, g, work);
      case 128:
        return attend_one_lanes<8>(o, b, g, work);
      case 256:
        return attend_one_lanes<16>(o, b, g, work);
      default:
        return attend_one(o, b, g, work);
    }
  }
}

template <class T>
FURLONG_INLINE void attend_range(const Operands<T>& o, int64_t begin, int64_t end) {
  thread_local std::vector<float> work;
  for (int64_t t = begin; t < end; ++t) attend_any(o, t / o.K, t % o.K, work);
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
          k.stride(0),
          k.stride(1),
          static_cast<float>(scale)};
}

}  // namespace

bool decode_attention_supported(int64_t num_heads, const at::Tensor& k_SKH,
                                const at::Tensor& v_SKH) {
  const auto dtype = k_SKH.scalar_type();
  return k_SKH.is_cpu() && v_SKH.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16) &&
         v_SKH.scalar_type() == dtype && k_SKH.dim() == 3 && v_SKH.sizes() == k_SKH.sizes() &&
         k_SKH.stride(2) == 1 && k_SKH.strides() == v_SKH.strides() && k_SKH.size(1) > 0 &&
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

bool write_cache_rows_supported(const at::Tensor& cache_SKH, const at::Tensor& slots_P,
                                const at::Tensor& rows_PKH) {
  return cache_SKH.is_cpu() && rows_PKH.is_cpu() && slots_P.is_cpu() && cache_SKH.dim() == 3 &&
         rows_PKH.dim() == 3 && cache_SKH.stride(2) == 1 &&
         rows_PKH.scalar_type() == cache_SKH.scalar_type() &&
         rows_PKH.size(1) == cache_SKH.size(1) && rows_PKH.size(2) == cache_SKH.size(2) &&
         slots_P.scalar_type() == at::kLong && slots_P.dim() == 1 &&
         slots_P.size(0) == rows_PKH.size(0);
}

void write_cache_rows(const at::Tensor& cache_SKH, const at::Tensor& slots_P,
                      const at::Tensor& rows_PKH) {
  FURLONG_ASSERT(write_cache_rows_supported(cache_SKH, slots_P, rows_PKH),
                 "write_cache_rows: unsupported operands: cache ", cache_SKH.sizes(), " ",
                 cache_SKH.scalar_type(), ", rows ", rows_PKH.sizes(), " ", rows_PKH.scalar_type(),
                 ", slots ", slots_P.sizes());
  const auto slots = slots_P.contiguous();
  const auto rows = rows_PKH.contiguous();
  const int64_t P = rows.size(0), K = rows.size(1), H = rows.size(2), S = cache_SKH.size(0);
  const int64_t* sl = slots.data_ptr<int64_t>();
  for (int64_t p = 0; p < P; ++p) {
    FURLONG_CHECK(sl[p] >= 0 && sl[p] < S, "write_cache_rows: slot ", sl[p], " of token ", p,
                  " is outside the cache's ", S, " slots");
  }
  const int64_t elem = cache_SKH.element_size();
  const int64_t stride_s = cache_SKH.stride(0) * elem, stride_k = cache_SKH.stride(1) * elem;
  auto* dst = static_cast<char*>(cache_SKH.data_ptr());
  const auto* src = static_cast<const char*>(rows.data_ptr());
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t k = 0; k < K; ++k) {
      std::memcpy(dst + sl[p] * stride_s + k * stride_k, src + (p * K + k) * H * elem,
                  static_cast<size_t>(H * elem));
    }
  }
}

}  // namespace furlong::kernels
