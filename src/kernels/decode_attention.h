// Attention of one new query token per sequence over that sequence's keys and values in a
// paged KV cache: the decode step of the rollout engine. It reads each cached key and value row
// in place (no gathered [B, L, K, H] copy, no padding mask), once per KV head for all the query
// heads that share it (grouped-query attention), and computes in fp32 whatever the cache dtype:
//   o[b, n] = sum_l softmax_l(scale * q[b, n] . k[slot_b(l), n / G]) v[slot_b(l), n / G]
// with G = N / K query heads per KV head. Each sequence is computed alone, in a fixed order (so
// its result does not depend on the other sequences of the batch), threads over (sequence, KV
// head). bf16 results are the fp32 values rounded once.
//
// Shapes (legend in docs/architecture.md): B = sequences, N = query heads, K = KV heads,
// H = head dim, S = cache slots, L = a sequence's cached length (its new token included).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace furlong::kernels {

// CPU caches of one dtype (float32 or bfloat16), [S, K, H] with each row of H contiguous and
// the same strides for K and V (contiguous, or head-major as engine::KvCache stores them), and
// N = num_heads a multiple of K (at most 64 query heads per KV head). q must then be
// [B, N, H] of that dtype.
bool decode_attention_supported(int64_t num_heads, const at::Tensor& k_SKH,
                                const at::Tensor& v_SKH);

// slots: the cache slots of every sequence, concatenated (int64, CPU, contiguous);
// cu_lens: B + 1 offsets into it (sequence b owns slots[cu_lens[b] .. cu_lens[b + 1]), at least
// one). Returns [B, N, H] in q's dtype.
at::Tensor decode_attention(const at::Tensor& q_BNH, const at::Tensor& k_SKH,
                            const at::Tensor& v_SKH, const at::Tensor& slots,
                            const std::vector<int64_t>& cu_lens, double scale);

// cache_SKH[slots_P[p]] = rows_PKH[p] for every p, as cache_SKH.index_copy_(0, slots_P,
// rows_PKH) does (slots distinct): the engine's write of a step's new keys or values, one copy
// of H elements per (token, KV head), where index_copy_ runs its general strided loop over
// every element of the head-major cache. Supported: a CPU cache
// whose rows of H are contiguous, rows of the same dtype and [P, K, H] shape, int64 CPU slots.
bool write_cache_rows_supported(const at::Tensor& cache_SKH, const at::Tensor& slots_P,
                                const at::Tensor& rows_PKH);
// Throws (naming the slot) where a slot is outside [0, S); the cache is then unchanged.
void write_cache_rows(const at::Tensor& cache_SKH, const at::Tensor& slots_P,
                      const at::Tensor& rows_PKH);

}  // namespace furlong::kernels
