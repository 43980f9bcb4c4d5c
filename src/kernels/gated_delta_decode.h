// One decode step of the gated delta rule (models/gated_delta_net.h) fused per (document,
// value head): the state is read once to form S^T k and once more to write the next state and
// the output, instead of the six passes and four temporaries of the elementwise form, and it
// is read from and written to each document's own buffers (no stacked copies).
//
// Per document b and value head h, with S = from[b][h] ([dk, dv]), d = exp(g):
//   kv = (d S)^T k,  delta = beta (v - kv),  S' = d S + k delta^T,  o = S'^T q
// q and k L2-normalized, q already scaled by dk^-1/2 (the caller's). Every intermediate is
// fp32; the products are rounded as recurrent_gated_delta_rule rounds them (d S first), the
// sums over dk run in order.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace furlong::kernels {

// q/k fp32 [B, Hv, dk], v fp32 [B, Hv, dv], g/beta fp32 [B, Hv], all contiguous; from[b], to[b]
// fp32 contiguous [Hv, dk, dv] (to[b] may not alias from[b]). Writes to[b]; returns o fp32
// [B, Hv, dv]. CPU tensors only.
at::Tensor gated_delta_decode_step(const at::Tensor& q_BHK, const at::Tensor& k_BHK,
                                   const at::Tensor& v_BHV, const at::Tensor& g_BH,
                                   const at::Tensor& beta_BH, const std::vector<at::Tensor>& from,
                                   const std::vector<at::Tensor>& to);

}  // namespace furlong::kernels
