#include "models/gated_delta_net.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/fused_ops.h"
#include "kernels/gated_delta_decode.h"

namespace furlong::models {
namespace {

// Packed row i of document b, position t -> padded row b * T + t.
at::Tensor padded_rows(const std::vector<int64_t>& cu_seqlens, int64_t T, c10::Device device) {
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(cu_seqlens.empty() ? 0 : cu_seqlens.back()));
  for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b) {
    for (int64_t t = 0; t < cu_seqlens[b + 1] - cu_seqlens[b]; ++t) {
      rows.push_back(static_cast<int64_t>(b) * T + t);
    }
  }
  return at::tensor(rows, at::kLong).to(device);
}

int64_t longest(const std::vector<int64_t>& cu_seqlens) {
  int64_t T = 0;
  for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b)
    T = std::max(T, cu_seqlens[b + 1] - cu_seqlens[b]);
  return T;
}

at::Tensor l2norm(const at::Tensor& x) {
  return x * at::rsqrt((x * x).sum(-1, /*keepdim=*/true) + 1e-6);
}

// [B, T, H, d] (or [B, T, H]) -> fp32 [B, H, T, d] ([B, H, T]), contiguous.
at::Tensor heads_first(const at::Tensor& x) {
  return x.transpose(1, 2).to(at::kFloat).contiguous();
}

// q/k heads repeated for the value heads they serve (each serves Hv / Hk consecutive ones).
at::Tensor to_value_heads(const at::Tensor& x_BTHK, int64_t Hv) {
  const int64_t Hk = x_BTHK.size(2);
  FURLONG_CHECK(Hv % Hk == 0, "gated delta rule: ", Hv, " value heads are not a multiple of ", Hk,
                " key heads");
  return Hk == Hv ? x_BTHK : x_BTHK.repeat_interleave(Hv / Hk, 2);
}

struct Prepared {
  at::Tensor q, k, v, g, beta;  // fp32 [B, Hv, T, d] / [B, Hv, T]; q, k L2-normalized
  int64_t B = 0, Hv = 0, T = 0, dk = 0, dv = 0;
};

Prepared prepare(const at::Tensor& q_BTHK, const at::Tensor& k_BTHK, const at::Tensor& v_BTHV,
                 const at::Tensor& g_BTH, const at::Tensor& beta_BTH) {
  Prepared p;
  p.B = v_BTHV.size(0);
  p.T = v_BTHV.size(1);
  p.Hv = v_BTHV.size(2);
  p.dv = v_BTHV.size(3);
  p.dk = k_BTHK.size(3);
  p.q = l2norm(heads_first(to_value_heads(q_BTHK, p.Hv)));
  p.k = l2norm(heads_first(to_value_heads(k_BTHK, p.Hv)));
  p.v = heads_first(v_BTHV);
  p.g = heads_first(g_BTH);
  p.beta = heads_first(beta_BTH);
  return p;
}

at::Tensor initial_state(const Prepared& p, const at::Tensor& state0_BHKV) {
  if (state0_BHKV.defined()) return state0_BHKV.to(at::kFloat);
  return at::zeros({p.B, p.Hv, p.dk, p.dv}, p.v.options());
}

}  // namespace

at::Tensor pad_documents(const at::Tensor& x_P, const std::vector<int64_t>& cu_seqlens,
                         int64_t multiple) {
  const int64_t B = static_cast<int64_t>(cu_seqlens.size()) - 1, L = longest(cu_seqlens);
  const int64_t T = (L + multiple - 1) / multiple * multiple;
  auto shape = x_P.sizes().vec();
  shape[0] = B * T;
  auto out =
      at::zeros(shape, x_P.options()).index_copy(0, padded_rows(cu_seqlens, T, x_P.device()), x_P);
  shape[0] = T;
  shape.insert(shape.begin(), B);
  return out.view(shape);
}

at::Tensor unpad_documents(const at::Tensor& x_BT, const std::vector<int64_t>& cu_seqlens) {
  const int64_t B = x_BT.size(0), T = x_BT.size(1);
  auto shape = x_BT.sizes().vec();
  shape.erase(shape.begin());
  shape[0] = B * T;
  return x_BT.reshape(shape).index_select(0, padded_rows(cu_seqlens, T, x_BT.device()));
}

at::Tensor causal_conv1d_silu(const at::Tensor& x_BTC, const at::Tensor& weight_C1W,
                              const at::Tensor& window_BCW) {
  const int64_t B = x_BTC.size(0), T = x_BTC.size(1), C = x_BTC.size(2);
  const int64_t W = weight_C1W.size(2);
  if (T == 0) return x_BTC;  // a document with no new tokens (a follower riding its leader)
  if (x_BTC.device().is_cpu()) {
    // The fused kernel: the same taps in the same order, without transposes or temporaries.
    auto window = window_BCW.defined() ? window_BCW.to(at::kFloat).contiguous() : at::Tensor();
    auto y_BTC = kernels::causal_conv(x_BTC.to(at::kFloat).contiguous(),
                                      weight_C1W.select(1, 0).to(at::kFloat).contiguous(), window);
    return at::silu(y_BTC.to(weight_C1W.scalar_type())).to(x_BTC.scalar_type());
  }
  // The W taps summed in a fixed order in fp32, as elementwise ops: every output is the same
  // bits wherever its document sits in a batch and however the weight is laid out (a library
  // convolution picks its algorithm by shape and alignment).
  auto x_BCT = x_BTC.transpose(1, 2).to(at::kFloat);
  auto before =
      window_BCW.defined() ? window_BCW.to(at::kFloat) : at::zeros({B, C, W - 1}, x_BCT.options());
  auto full_BCL = at::cat({before, x_BCT}, 2);
  auto w_CW = weight_C1W.select(1, 0).to(at::kFloat);
  auto y_BCT = full_BCL.narrow(2, 0, T) * w_CW.select(1, 0).view({1, C, 1});
  for (int64_t j = 1; j < W; ++j) {
    y_BCT = y_BCT + full_BCL.narrow(2, j, T) * w_CW.select(1, j).view({1, C, 1});
  }
  return at::silu(y_BCT.to(weight_C1W.scalar_type())).to(x_BTC.scalar_type()).transpose(1, 2);
}

at::Tensor next_conv_windows(const at::Tensor& window_BCW, const at::Tensor& x_BTC,
                             const std::vector<int64_t>& cu_seqlens) {
  const int64_t B = x_BTC.size(0), C = x_BTC.size(2), keep = window_BCW.size(2);
  auto full_BCL = at::cat({window_BCW.to(x_BTC.scalar_type()), x_BTC.transpose(1, 2)}, 2);
  std::vector<int64_t> index;  // document b's window: positions n_b .. n_b + keep - 1 of full
  for (int64_t b = 0; b < B; ++b) {
    const auto n = cu_seqlens[static_cast<size_t>(b) + 1] - cu_seqlens[static_cast<size_t>(b)];
    for (int64_t j = 0; j < keep; ++j) index.push_back(n + j);
  }
  auto index_BCW =
      at::tensor(index, at::kLong).to(x_BTC.device()).view({B, 1, keep}).expand({B, C, keep});
  return full_BCL.gather(2, index_BCW);
}

GatedDeltaOut chunk_gated_delta_rule(const at::Tensor& q_BTHK, const at::Tensor& k_BTHK,
                                     const at::Tensor& v_BTHV, const at::Tensor& g_BTH,
                                     const at::Tensor& beta_BTH, const at::Tensor& state0_BHKV,
                                     int64_t chunk) {
  Prepared p = prepare(q_BTHK, k_BTHK, v_BTHV, g_BTH, beta_BTH);
  if (p.T == 0) return {at::empty_like(v_BTHV), initial_state(p, state0_BHKV)};  // no tokens
  auto q = p.q * std::pow(static_cast<double>(p.dk), -0.5);
  const int64_t pad = (chunk - p.T % chunk) % chunk, N = (p.T + pad) / chunk;
  q = at::constant_pad_nd(q, {0, 0, 0, pad});
  auto k = at::constant_pad_nd(p.k, {0, 0, 0, pad});
  auto v = at::constant_pad_nd(p.v, {0, 0, 0, pad});
  auto beta = at::constant_pad_nd(p.beta, {0, pad});
  auto g = at::constant_pad_nd(p.g, {0, pad});
  auto v_beta = v * beta.unsqueeze(-1);
  auto k_beta = k * beta.unsqueeze(-1);
  auto chunked = [&](const at::Tensor& x) { return x.reshape({p.B, p.Hv, N, chunk, x.size(-1)}); };
  q = chunked(q);
  k = chunked(k);
  k_beta = chunked(k_beta);
  v_beta = chunked(v_beta);
  g = g.reshape({p.B, p.Hv, N, chunk});
  const auto upper = at::ones({chunk, chunk}, q.options().dtype(at::kBool)).triu(1);
  const auto cum = g.cumsum(3);  // log of the decay from the chunk's start to each position
  const auto pair_decay = (cum.unsqueeze(4) - cum.unsqueeze(3))
                              .masked_fill(upper, -std::numeric_limits<double>::infinity())
                              .exp();
  const auto ut_system = at::matmul(k_beta, k.transpose(-1, -2)) * pair_decay;
  const auto intra = at::matmul(q, k.transpose(-1, -2)) * pair_decay;
  const auto decayed_k_beta = k_beta * cum.exp().unsqueeze(-1);
  const auto new_values = at::linalg_solve_triangular(ut_system, v_beta, /*upper=*/false,
                                                      /*left=*/true, /*unitriangular=*/true);
  const auto k_cumdecay = at::linalg_solve_triangular(ut_system, decayed_k_beta, false, true, true);
  auto state = initial_state(p, state0_BHKV);
  q = q * cum.exp().unsqueeze(-1);
  k = k * (cum.slice(3, chunk - 1) - cum).exp().unsqueeze(-1);
  const auto chunk_decay = cum.select(3, chunk - 1).exp().unsqueeze(-1).unsqueeze(-1);
  std::vector<at::Tensor> out_chunks;
  out_chunks.reserve(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    auto v_new = new_values.select(2, i) - at::matmul(k_cumdecay.select(2, i), state);
    auto inter = at::matmul(q.select(2, i), state);
    out_chunks.push_back(inter + at::matmul(intra.select(2, i), v_new));
    state = state * chunk_decay.select(2, i) + at::matmul(k.select(2, i).transpose(-1, -2), v_new);
  }
  auto o = at::stack(out_chunks, 2).reshape({p.B, p.Hv, N * chunk, p.dv}).slice(2, 0, p.T);
  return {o.transpose(1, 2).to(q_BTHK.scalar_type()).contiguous(), state};
}

GatedDeltaOut recurrent_gated_delta_rule(const at::Tensor& q_BTHK, const at::Tensor& k_BTHK,
                                         const at::Tensor& v_BTHV, const at::Tensor& g_BTH,
                                         const at::Tensor& beta_BTH,
                                         const at::Tensor& state0_BHKV) {
  Prepared p = prepare(q_BTHK, k_BTHK, v_BTHV, g_BTH, beta_BTH);
  if (p.T == 0) return {at::empty_like(v_BTHV), initial_state(p, state0_BHKV)};  // no tokens
  auto q = p.q / std::sqrt(static_cast<double>(p.dk));
  auto state = initial_state(p, state0_BHKV);
  std::vector<at::Tensor> outs;
  outs.reserve(static_cast<size_t>(p.T));
  for (int64_t t = 0; t < p.T; ++t) {
    auto q_t = q.select(2, t), k_t = p.k.select(2, t), v_t = p.v.select(2, t);
    state = state * p.g.select(2, t).exp().unsqueeze(-1).unsqueeze(-1);
    auto kv_mem = (state * k_t.unsqueeze(-1)).sum(-2);
    auto delta = (v_t - kv_mem) * p.beta.select(2, t).unsqueeze(-1);
    state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2);
    outs.push_back((state * q_t.unsqueeze(-1)).sum(-2));
  }
  auto o = at::stack(outs, 2);  // [B, Hv, T, dv]
  return {o.transpose(1, 2).contiguous().to(q_BTHK.scalar_type()), state};
}

at::Tensor gated_delta_decode_into(const at::Tensor& q_BTHK, const at::Tensor& k_BTHK,
                                   const at::Tensor& v_BTHV, const at::Tensor& g_BTH,
                                   const at::Tensor& beta_BTH, const std::vector<at::Tensor>& from,
                                   const std::vector<at::Tensor>& to) {
  FURLONG_CHECK(v_BTHV.size(1) == 1, "gated delta decode: one token per document, got ",
                v_BTHV.size(1));
  Prepared p = prepare(q_BTHK, k_BTHK, v_BTHV, g_BTH, beta_BTH);
  auto q = p.q / std::sqrt(static_cast<double>(p.dk));  // as recurrent_gated_delta_rule
  auto o_BHV = kernels::gated_delta_decode_step(
      q.select(2, 0).contiguous(), p.k.select(2, 0).contiguous(), p.v.select(2, 0).contiguous(),
      p.g.select(2, 0).contiguous(), p.beta.select(2, 0).contiguous(), from, to);
  return o_BHV.unsqueeze(1).to(q_BTHK.scalar_type());
}

}  // namespace furlong::models
