// Single-device building blocks of Llama-family decoders, written to reproduce transformers'
// numerics op for op (same dtypes at each step), so that fp32 results agree to rounding and
// bf16 results agree to the last few ulps.
//
// Shapes (legend in docs/architecture.md): P = packed tokens, D = model dim, N = query heads, K =
// key/value heads, H = head dim, F = MLP hidden dim.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/model_config.h"
#include "models/packed_batch.h"

namespace furlong::models {

enum class AttnImpl {
  kSdpa,   // CPU: at::scaled_dot_product_attention per document; CUDA bf16/fp16: one varlen
           // flash-attention call over all documents
  kEager,  // plain matmul + fp32 softmax, transformers' "eager" path; the reference
};
AttnImpl parse_attn_impl(const std::string& name, const std::string& where);

// RMSNorm as transformers computes it: normalize in fp32, cast back, then scale.
// `fused` uses the one-pass CPU kernel where it applies (CPU, fp32/bf16), else ATen ops.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool fused = true);

// RMSNorm with weights stored as offsets from 1, as transformers computes it for Qwen3.5:
// (normalize(x) * (1 + weight)) all in fp32, then cast to x's dtype.
// `fused` as for rms_norm (fp32 only: it is then rms_norm with the weight 1 + w).
at::Tensor zero_centered_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps,
                                  bool fused = true);

// inv_freq [H/2] (fp32) and the cos/sin scaling for the configured rope type.
struct RotaryEmbedding {
  at::Tensor inv_freq;
  double attention_scaling = 1.0;
  RopeConfig rope;
  int64_t head_dim = 0;  // the rotated width of a head (head_dim x partial_rotary_factor)
  int64_t max_position_embeddings = 0;

  static RotaryEmbedding create(const ModelConfig& config);
  // cos/sin [P, H] in `dtype` for the given positions (computed in fp32 first).
  std::pair<at::Tensor, at::Tensor> cos_sin(const at::Tensor& position_ids_P,
                                            c10::ScalarType dtype) const;
};

// x_PNH * cos + rotate_half(x_PNH) * sin, with cos/sin [P, H] broadcast over heads.
at::Tensor apply_rope(const at::Tensor& x_PNH, const at::Tensor& cos_PH, const at::Tensor& sin_PH,
                      bool fused = true);

// Causal attention within each document of `batch`; K may divide N (grouped-query attention).
at::Tensor attention(const at::Tensor& q_PNH, const at::Tensor& k_PKH, const at::Tensor& v_PKH,
                     const PackedBatch& batch, AttnImpl impl, double scale);

// y = x W^T + b (b may be undefined). Unset: at::linear, the trainer's GEMM; the rollout engine
// substitutes its inference GEMM (kernels::inference_linear).
using LinearFn =
    std::function<at::Tensor(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)>;
at::Tensor apply_linear(const LinearFn& linear, const at::Tensor& x, const at::Tensor& w,
                        const at::Tensor& b);
// Optional: y[rows of g] = x[rows of g] W_g^T for consecutive row groups (the MoE experts), in
// one call; returns an undefined tensor to decline, and the caller then loops over the groups
// with its LinearFn. The rollout engine sets kernels::grouped_inference_linear.
using GroupedLinearFn = std::function<at::Tensor(
    const at::Tensor& x, const std::vector<at::Tensor>& w_G, const std::vector<int64_t>& rows_G)>;

// down(silu(gate(x)) * up(x)); biases may be undefined.
at::Tensor swiglu_mlp(const at::Tensor& x_PD, const at::Tensor& gate_FD, const at::Tensor& gate_b,
                      const at::Tensor& up_FD, const at::Tensor& up_b, const at::Tensor& down_DF,
                      const at::Tensor& down_b, bool fused = true, const LinearFn& linear = {});

}  // namespace furlong::models
