// Gated DeltaNet, the linear-attention layer of hybrid models (Qwen3.5), as functional ops on
// packed documents. Each document starts from a zero conv window and a zero recurrent state
// (so a packed batch equals its documents run one by one), unless a state is passed in.
//
// The recurrence per value head, with S [d_k, d_v], decay g_t <= 0 and beta_t in (0, 1):
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - exp(g_t) S_{t-1}^T k_t))^T,   o_t = S_t^T q_t
// with q and k L2-normalized and q scaled by d_k^-1/2. The chunked form computes it for a whole
// sequence with chunk-sized matrix products (transformers' torch_chunk_gated_delta_rule, op for
// op); the recurrent form takes one token per step (decode).
//
// Shapes: P packed tokens, B documents, T padded document length, C conv channels
// (2 * Hk * dk + Hv * dv), Hk q/k heads, Hv value heads, dk/dv head dims.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace furlong::models {

// The state each document of a batch starts a DeltaNet layer from and leaves it with, kept
// between forward passes by the rollout engine (one set per running sequence). Without it
// (training, scoring) every document starts from zero and nothing is kept.
class LinearAttentionStates {
 public:
  virtual ~LinearAttentionStates() = default;
  // Layer `layer`'s conv windows [B, C, W-1] (the W-1 inputs before each document's first
  // token) and recurrent states [B, Hv, dk, dv] (fp32), for the batch's B documents.
  virtual std::pair<at::Tensor, at::Tensor> read(int64_t layer) const = 0;
  // The same after each document's last token. With decode_buffers (below) in use the
  // recurrent states went to the buffers, and state_BHKV is undefined.
  virtual void write(int64_t layer, const at::Tensor& window_BCW, const at::Tensor& state_BHKV) = 0;

  // Optional, for a step of single tokens (decode) on the CPU: each document's recurrent state
  // to read (`from`) and a buffer of the same shape to write the next one into (`to`), fp32
  // contiguous [Hv, dk, dv], so that the step runs on them in place of stacked copies. Empty:
  // not offered.
  struct DecodeBuffers {
    std::vector<at::Tensor> from, to;
  };
  virtual DecodeBuffers decode_buffers(int64_t layer) {
    (void)layer;
    return {};
  }
};

// Rows of the packed [P, ...] tensor `x` laid out as [B, T, ...] (zeros past each document's
// end), T = the longest document rounded up to a multiple of `multiple`; and back.
at::Tensor pad_documents(const at::Tensor& x_P, const std::vector<int64_t>& cu_seqlens,
                         int64_t multiple);
at::Tensor unpad_documents(const at::Tensor& x_BT, const std::vector<int64_t>& cu_seqlens);

// Depthwise causal conv1d over time, then SiLU (transformers' causal_conv1d_fn):
// x [B, T, C], weight [C, 1, W] -> [B, T, C]; position t sees t-W+1..t of its document, and
// zeros (or the W-1 columns of `window_BCW` when given) before its start.
at::Tensor causal_conv1d_silu(const at::Tensor& x_BTC, const at::Tensor& weight_C1W,
                              const at::Tensor& window_BCW = {});
// The W-1 inputs before each document's next token: the last W-1 of its window followed by its
// padded inputs x [B, T, C] (document b has the length its cu_seqlens give).
at::Tensor next_conv_windows(const at::Tensor& window_BCW, const at::Tensor& x_BTC,
                             const std::vector<int64_t>& cu_seqlens);

struct GatedDeltaOut {
  at::Tensor o_BTHV;      // [B, T, Hv, dv] in q's dtype
  at::Tensor state_BHKV;  // [B, Hv, dk, dv] fp32 after the last position
};

// The chunked gated delta rule. q/k [B, T, Hk, dk], v [B, T, Hv, dv], g/beta [B, T, Hv]; g and
// beta must be 0 at padded positions (the state then passes them unchanged). `state0` optional
// [B, Hv, dk, dv]. T is padded inside to a multiple of `chunk`.
GatedDeltaOut chunk_gated_delta_rule(const at::Tensor& q_BTHK, const at::Tensor& k_BTHK,
                                     const at::Tensor& v_BTHV, const at::Tensor& g_BTH,
                                     const at::Tensor& beta_BTH, const at::Tensor& state0_BHKV = {},
                                     int64_t chunk = 64);

// The same rule one token at a time (transformers' torch_recurrent_gated_delta_rule).
GatedDeltaOut recurrent_gated_delta_rule(const at::Tensor& q_BTHK, const at::Tensor& k_BTHK,
                                         const at::Tensor& v_BTHV, const at::Tensor& g_BTH,
                                         const at::Tensor& beta_BTH,
                                         const at::Tensor& state0_BHKV = {});

// The recurrent rule for one token per document (T = 1), reading document b's state from
// from[b] and writing the next one into to[b] (LinearAttentionStates::DecodeBuffers) through the
// fused kernel (kernels/gated_delta_decode.h). Returns o [B, 1, Hv, dv] in q's dtype. CPU only.
at::Tensor gated_delta_decode_into(const at::Tensor& q_BTHK, const at::Tensor& k_BTHK,
                                   const at::Tensor& v_BTHV, const at::Tensor& g_BTH,
                                   const at::Tensor& beta_BTH, const std::vector<at::Tensor>& from,
                                   const std::vector<at::Tensor>& to);

}  // namespace furlong::models
