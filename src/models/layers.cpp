#include "models/layers.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "kernels/cpu_kernels.h"
#include "kernels/fused_ops.h"

namespace furlong::models {

AttnImpl parse_attn_impl(const std::string& name, const std::string& where) {
  if (name == "sdpa") return AttnImpl::kSdpa;
  if (name == "eager") return AttnImpl::kEager;
  FURLONG_FAIL(where, ": unknown attention implementation '", name,
               "'; expected sdpa (fused kernel, default) or eager (plain math reference)");
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool fused) {
  if (fused && kernels::supported(x) && weight.scalar_type() == x.scalar_type()) {
    return kernels::rms_norm(x, weight, eps);
  }
  auto input_dtype = x.scalar_type();
  auto x32 = x.to(at::kFloat);
  auto variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  auto normed = x32 * at::rsqrt(variance + eps);
  return weight * normed.to(input_dtype);
}

namespace {

at::Tensor default_inv_freq(double theta, int64_t dim) {
  auto exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  return 1.0 / at::pow(at::Scalar(theta), exponent);
}

at::Tensor llama3_inv_freq(const RopeConfig& r, int64_t dim) {
  auto inv_freq = default_inv_freq(r.theta, dim);
  double old_context = static_cast<double>(r.original_max_position_embeddings);
  double low_freq_wavelen = old_context / r.low_freq_factor;
  double high_freq_wavelen = old_context / r.high_freq_factor;
  auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = at::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  auto smooth =
      (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  auto is_medium = at::logical_not(wavelen < high_freq_wavelen)
                       .logical_and(at::logical_not(wavelen > low_freq_wavelen));
  return at::where(is_medium, smoothed, scaled);
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

std::pair<at::Tensor, double> yarn_inv_freq(const RopeConfig& r, int64_t dim) {
  double attention_factor;
  if (r.attention_factor) {
    attention_factor = *r.attention_factor;
  } else if (r.mscale && r.mscale_all_dim && *r.mscale != 0 && *r.mscale_all_dim != 0) {
    attention_factor = yarn_mscale(r.factor, *r.mscale) / yarn_mscale(r.factor, *r.mscale_all_dim);
  } else {
    attention_factor = yarn_mscale(r.factor, 1.0);
  }
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(r.original_max_position_embeddings / (rotations * 2 * M_PI))) /
           (2 * std::log(r.theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  auto pos_freqs = at::pow(at::Scalar(r.theta), at::arange(0, dim, 2).to(at::kFloat) / dim);
  auto extrapolation = 1.0 / pos_freqs;
  auto interpolation = 1.0 / (r.factor * pos_freqs);
  auto ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
  auto extrapolation_factor = 1 - ramp;
  auto inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  return {inv_freq, attention_factor};
}

// Dynamic NTK: the base grows once positions exceed max_position_embeddings. Computed in fp32
// tensor arithmetic, as transformers does at run time.
at::Tensor dynamic_inv_freq(const RopeConfig& r, int64_t dim, int64_t seq_len,
                            int64_t max_position_embeddings) {
  auto len = at::scalar_tensor(std::max(seq_len, max_position_embeddings), at::kLong);
  auto base = r.theta * at::pow((r.factor * len / max_position_embeddings) - (r.factor - 1),
                                static_cast<double>(dim) / (dim - 2));
  auto exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  return 1.0 / at::pow(base, exponent);
}

}  // namespace

at::Tensor zero_centered_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps,
                                  bool fused) {
  // In fp32 this is rms_norm with the weight 1 + w; the fused kernel then gives every row the
  // same bits whatever the other rows (ATen's elementwise ops round a tensor's tail elements
  // differently), so a sequence scores alike in any batch.
  auto contiguous = x.contiguous();
  if (fused && x.scalar_type() == at::kFloat && kernels::supported(contiguous)) {
    return kernels::rms_norm(contiguous, 1.0 + weight.to(at::kFloat), eps);
  }
  auto xf = x.to(at::kFloat);
  auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * (1.0 + weight.to(at::kFloat))).to(x.scalar_type());
}

RotaryEmbedding RotaryEmbedding::create(const ModelConfig& config) {
  RotaryEmbedding re;
  re.rope = config.rope;
  // The rotated width: all of each head, or its first partial_rotary_factor (Qwen3.5).
  re.head_dim = static_cast<int64_t>(static_cast<double>(config.head_dim) *
                                     config.rope.partial_rotary_factor);
  re.max_position_embeddings = config.max_position_embeddings;
  const RopeConfig& r = config.rope;
  int64_t dim = re.head_dim;
  if (r.type == "default" || r.type == "dynamic") {
    re.inv_freq = default_inv_freq(r.theta, dim);
  } else if (r.type == "linear") {
    re.inv_freq = default_inv_freq(r.theta, dim) / r.factor;
  } else if (r.type == "llama3") {
    re.inv_freq = llama3_inv_freq(r, dim);
  } else if (r.type == "yarn") {
    std::tie(re.inv_freq, re.attention_scaling) = yarn_inv_freq(r, dim);
  } else {
    FURLONG_FAIL("unsupported rope type '", r.type, "'");
  }
  return re;
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin(const at::Tensor& position_ids_P,
                                                           c10::ScalarType dtype) const {
  at::Tensor freq = inv_freq;
  if (rope.type == "dynamic" && position_ids_P.numel() > 0) {
    int64_t seq_len = position_ids_P.max().item<int64_t>() + 1;
    if (seq_len > max_position_embeddings) {
      freq = dynamic_inv_freq(rope, head_dim, seq_len, max_position_embeddings);
    }
  }
  freq = freq.to(position_ids_P.device());
  // Rows padded to a multiple of 64, so every element takes ATen's vector path: its scalar
  // path for a tensor's last elements rounds cos/sin differently, and a position's table row
  // would then depend on how many others are in the batch (narrow rotary widths, Qwen3.5).
  const int64_t P = position_ids_P.size(0), padded = (P + 63) / 64 * 64;
  auto positions = at::constant_pad_nd(position_ids_P, {0, padded - P}).to(at::kFloat);
  auto freqs_TH2 = positions.unsqueeze(-1) * freq;
  auto emb_PH = at::cat({freqs_TH2, freqs_TH2}, -1);
  auto cos = (emb_PH.cos() * attention_scaling).slice(0, 0, P);
  auto sin = (emb_PH.sin() * attention_scaling).slice(0, 0, P);
  return {cos.to(dtype).contiguous(), sin.to(dtype).contiguous()};
}

at::Tensor apply_rope(const at::Tensor& x_PNH, const at::Tensor& cos_PH, const at::Tensor& sin_PH,
                      bool fused) {
  if (fused && kernels::supported(x_PNH) && cos_PH.scalar_type() == x_PNH.scalar_type()) {
    return kernels::rope(x_PNH, cos_PH, sin_PH);
  }
  int64_t half = x_PNH.size(-1) / 2;
  auto x1 = x_PNH.narrow(-1, 0, half);
  auto x2 = x_PNH.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  auto cos = cos_PH.unsqueeze(1);
  auto sin = sin_PH.unsqueeze(1);
  return x_PNH * cos + rotated * sin;
}

namespace {

// Where query i of a document's L rows may look among its S = prefix + L keys: the whole shared
// prefix and its own rows up to i (causal, aligned to the last key).
at::Tensor visible_keys_LS(int64_t L, int64_t S, const at::Tensor& like) {
  return at::ones({L, S}, like.options().dtype(at::kBool)).tril(S - L);
}

// One document, [1, N, L, H] queries and [1, K, S, H] keys/values (S >= L: a shared prefix).
at::Tensor eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale) {
  int64_t groups = q.size(1) / k.size(1);
  auto k_rep = groups == 1 ? k : k.repeat_interleave(groups, 1);
  auto v_rep = groups == 1 ? v : v.repeat_interleave(groups, 1);
  auto scores = at::matmul(q, k_rep.transpose(2, 3)) * scale;
  auto hidden = visible_keys_LS(q.size(2), k.size(2), q).logical_not();
  scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  auto probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(probs, v_rep);
}

at::Tensor document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              AttnImpl impl, double scale) {
  if (impl == AttnImpl::kEager) return eager_attention(q, k, v, scale);
  const bool prefixed = k.size(2) > q.size(2);
  std::optional<at::Tensor> mask;
  if (prefixed) mask = visible_keys_LS(q.size(2), k.size(2), q);
  return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0,
                                          /*is_causal=*/!prefixed, scale,
                                          /*enable_gqa=*/q.size(1) != k.size(1));
}

// CUDA, sdpa, half precision, a head size flash attention takes: one varlen flash-attention call
// covers every document of the packed batch (cumulative lengths on the device), instead of a
// kernel launch per document. Autograd differentiates it (aten's flash-attention backward).
bool varlen_flash_usable(const at::Tensor& q_PNH, const at::Tensor& k_PKH, AttnImpl impl) {
  const auto dtype = q_PNH.scalar_type();
  const int64_t head_dim = q_PNH.size(2);
  return impl == AttnImpl::kSdpa && q_PNH.is_cuda() &&
         (dtype == at::kBFloat16 || dtype == at::kHalf) && head_dim % 8 == 0 && head_dim <= 256 &&
         q_PNH.size(1) % k_PKH.size(1) == 0;
}

at::Tensor varlen_flash_attention(const at::Tensor& q_PNH, const at::Tensor& k_PKH,
                                  const at::Tensor& v_PKH, const PackedBatch& batch, double scale) {
  std::vector<int32_t> cu(batch.cu_seqlens.begin(), batch.cu_seqlens.end());
  auto cu_D = at::tensor(cu, at::TensorOptions().dtype(at::kInt)).to(q_PNH.device());
  const int64_t longest = batch.max_document_length();
  auto outputs = at::_flash_attention_forward(
      q_PNH.contiguous(), k_PKH.contiguous(), v_PKH.contiguous(), cu_D, cu_D, longest, longest,
      /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false,
      std::optional<double>(scale));
  return std::get<0>(outputs);  // [P, N, H]
}

}  // namespace

at::Tensor attention(const at::Tensor& q_PNH, const at::Tensor& k_PKH, const at::Tensor& v_PKH,
                     const PackedBatch& batch, AttnImpl impl, double scale) {
  FURLONG_ASSERT(q_PNH.size(0) == batch.num_tokens(), "attention: ", q_PNH.size(0),
                 " tokens but the batch has ", batch.num_tokens());
  if (batch.num_documents() > 0 && !batch.has_prefixes() &&
      varlen_flash_usable(q_PNH, k_PKH, impl)) {
    return varlen_flash_attention(q_PNH, k_PKH, v_PKH, batch, scale);
  }
  auto heads_first = [](const at::Tensor& x) { return x.transpose(0, 1).unsqueeze(0); };
  // A document's keys/values: its shared prefix's rows, then its own.
  auto keys = [&](const at::Tensor& x_PKH, int64_t d, int64_t start, int64_t len) {
    const auto& prefix = batch.prefix(d);
    auto own = x_PKH.narrow(0, start, len);
    if (prefix.length == 0) return heads_first(own);
    return heads_first(at::cat({x_PKH.narrow(0, prefix.start, prefix.length), own}, 0));
  };
  std::vector<at::Tensor> outputs;
  outputs.reserve(batch.num_documents());
  for (int64_t d = 0; d < batch.num_documents(); ++d) {
    int64_t start = batch.cu_seqlens[d];
    int64_t len = batch.cu_seqlens[d + 1] - start;
    auto out =
        document_attention(heads_first(q_PNH.narrow(0, start, len)), keys(k_PKH, d, start, len),
                           keys(v_PKH, d, start, len), impl, scale);
    outputs.push_back(out.squeeze(0).transpose(0, 1));  // [L, N, H]
  }
  return outputs.size() == 1 ? outputs[0] : at::cat(outputs, 0);
}

at::Tensor apply_linear(const LinearFn& linear, const at::Tensor& x, const at::Tensor& w,
                        const at::Tensor& b) {
  return linear ? linear(x, w, b) : at::linear(x, w, b);
}

at::Tensor swiglu_mlp(const at::Tensor& x_PD, const at::Tensor& gate_FD, const at::Tensor& gate_b,
                      const at::Tensor& up_FD, const at::Tensor& up_b, const at::Tensor& down_DF,
                      const at::Tensor& down_b, bool fused, const LinearFn& linear) {
  auto gate = apply_linear(linear, x_PD, gate_FD, gate_b);
  auto up = apply_linear(linear, x_PD, up_FD, up_b);
  auto hidden = fused && kernels::supported(gate) ? kernels::swiglu(gate, up) : at::silu(gate) * up;
  return apply_linear(linear, hidden, down_DF, down_b);
}

}  // namespace furlong::models
