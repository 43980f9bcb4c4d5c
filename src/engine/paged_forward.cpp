#include "engine/paged_forward.h"

#include <ATen/ATen.h>

#include <limits>

#include "core/error.h"
#include "kernels/decode_attention.h"
#include "kernels/inference_linear.h"
#include "models/gated_delta_net.h"
#include "models/layers.h"

namespace furlong::engine {
namespace {

// A host tensor on `device`. On CUDA it goes through pinned memory as a non-blocking copy on
// the current stream, so building a step's indices never waits for the GPU (the caching host
// allocator keeps the pinned block until the copy has run); on CPU it is the tensor itself.
at::Tensor upload(const at::Tensor& host, c10::Device device) {
  if (device.is_cpu()) return host;
  auto pinned = at::empty(host.sizes(), host.options().pinned_memory(true));
  pinned.copy_(host);
  return pinned.to(device, /*non_blocking=*/true);
}

// Attention in [B, heads, len, H] layout; mask (optional, bool, true = may attend) broadcasts
// to [B, N, n, L]. Eager: plain matmul + fp32 softmax (the reference); else SDPA.
at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, models::AttnImpl impl, double scale) {
  const int64_t groups = q.size(1) / k.size(1);
  if (impl == models::AttnImpl::kEager) {
    auto k_rep = groups == 1 ? k : k.repeat_interleave(groups, 1);
    auto v_rep = groups == 1 ? v : v.repeat_interleave(groups, 1);
    auto scores = at::matmul(q, k_rep.transpose(2, 3)) * scale;
    if (mask.defined()) {
      scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
    }
    auto probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
    return at::matmul(probs, v_rep);
  }
  std::optional<at::Tensor> attn_mask;
  if (mask.defined()) attn_mask = mask;
  return at::scaled_dot_product_attention(q, k, v, attn_mask, /*dropout_p=*/0.0,
                                          /*is_causal=*/false, scale,
                                          /*enable_gqa=*/groups != 1);
}

// Attention of `n` new queries at positions start..start+n-1 over the cached keys/values of
// positions 0..start+n-1 ([L, K, H]); q is [n, N, H]. Returns [n, N, H].
at::Tensor cached_attention(const at::Tensor& q_nNH, const at::Tensor& k_LKH,
                            const at::Tensor& v_LKH, int64_t start, models::AttnImpl impl,
                            double scale) {
  const int64_t n = q_nNH.size(0), L = k_LKH.size(0);
  auto q = q_nNH.transpose(0, 1).unsqueeze(0);  // [1, N, n, H]
  auto k = k_LKH.transpose(0, 1).unsqueeze(0);  // [1, K, L, H]
  auto v = v_LKH.transpose(0, 1).unsqueeze(0);
  at::Tensor mask;  // only needed when several new queries see the cache
  if (n > 1) {
    auto key_pos = at::arange(L, q.options().dtype(at::kLong));
    auto query_pos = at::arange(start, start + n, q.options().dtype(at::kLong));
    mask = key_pos.unsqueeze(0) <= query_pos.unsqueeze(1);  // [n, L]
  }
  return masked_attention(q, k, v, mask, impl, scale).squeeze(0).transpose(0, 1);
}

// The single-token decodes of a step, attended together. On CPU with SDPA (fp32 or bf16) the
// kernel kernels::decode_attention reads each sequence's cached rows in place (`in_place`: every
// decode, a lone one too; no gathered, padded copy, so faster than the gather + SDPA below:
// DecodeAttention.DISABLED_ReportThroughput). Otherwise each sequence's cached keys are
// gathered into a [B, L_max] table (padded with its own slot 0, masked out) for masked_attention,
// and a lone decode takes cached_attention's unpadded path.
struct DecodeBatch {
  at::Tensor rows_B;       // packed row of each decode token
  bool every_row = false;  // the decodes are all the packed rows (rows_B = 0..P-1)
  bool in_place = false;
  at::Tensor slots_T;            // in place: every member's slots, concatenated (int64, CPU)
  std::vector<int64_t> cu_lens;  // in place: B + 1 offsets into slots_T
  at::Tensor slots_BL;           // gathered: int64 [B * L_max]
  at::Tensor mask_B11L;          // gathered: bool
  int64_t size = 0, max_len = 0;
  std::vector<bool> member;  // per sequence: part of this batch

  DecodeBatch(const std::vector<StepSequence>& seqs, const std::vector<int64_t>& cu,
              c10::Device device, bool in_place_kernel)
      : in_place(in_place_kernel) {
    member.assign(seqs.size(), false);
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].num_new == 1 && seqs[i].start > 0) {
        member[i] = true;
        ++size;
        max_len = std::max(max_len, seqs[i].start + 1);
      }
    }
    if (size < (in_place ? 1 : 2)) {  // one decode alone takes the unpadded path
      size = 0;
      member.assign(seqs.size(), false);
      return;
    }
    std::vector<int64_t> rows;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (member[i]) rows.push_back(cu[i]);
    }
    every_row = size == cu.back();  // each member has one packed row
    rows_B = upload(at::tensor(rows, at::kLong), device);
    if (in_place) {
      std::vector<at::Tensor> parts;
      cu_lens = {0};
      for (size_t i = 0; i < seqs.size(); ++i) {
        if (!member[i]) continue;
        parts.push_back(seqs[i].slots.narrow(0, 0, seqs[i].start + 1));
        cu_lens.push_back(cu_lens.back() + seqs[i].start + 1);
      }
      slots_T = at::cat(parts).contiguous();
      return;
    }
    auto slots = at::empty({size, max_len}, at::kLong);
    auto mask = at::zeros({size, 1, 1, max_len}, at::kBool);
    int64_t b = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (!member[i]) continue;
      const int64_t len = seqs[i].start + 1;
      auto seq_slots = seqs[i].slots.narrow(0, 0, len);
      slots[b].narrow(0, 0, len).copy_(seq_slots);
      slots[b].narrow(0, len, max_len - len).fill_(seq_slots[0].item<int64_t>());
      mask[b].narrow(-1, 0, len).fill_(true);
      ++b;
    }
    slots_BL = upload(slots.view(-1), device);
    mask_B11L = upload(mask, device);
  }

  at::Tensor attend(const at::Tensor& q_PNH, const at::Tensor& k_cache, const at::Tensor& v_cache,
                    models::AttnImpl impl, double scale) const {
    auto q_BNH = every_row ? q_PNH : q_PNH.index_select(0, rows_B);
    if (in_place) {
      return kernels::decode_attention(q_BNH, k_cache, v_cache, slots_T, cu_lens, scale);
    }
    const int64_t K = k_cache.size(1), H = k_cache.size(2);
    auto q = q_BNH.unsqueeze(2);  // [B, N, 1, H]
    auto k = k_cache.index_select(0, slots_BL).view({size, max_len, K, H}).transpose(1, 2);
    auto v = v_cache.index_select(0, slots_BL).view({size, max_len, K, H}).transpose(1, 2);
    return masked_attention(q, k, v, mask_B11L, impl, scale).squeeze(2);  // [B, N, H]
  }
};

// Writes the expert ids `trace` recorded for the P packed tokens into the cache's routing pool
// at their slots: int32 [P, L, K], -1 in the columns of dense layers.
void store_routing(const models::CausalLM& model, KvCache& cache, const models::MoeTrace& trace,
                   const at::Tensor& slots_P) {
  auto& pool = cache.routing();
  auto ids_PLK =
      at::full({slots_P.size(0), pool.size(1), pool.size(2)}, -1, pool.options().dtype(at::kInt));
  for (int64_t l = 0; l < model.num_layers() && l < static_cast<int64_t>(trace.recorded.size());
       ++l) {
    if (trace.recorded[l].defined()) ids_PLK.select(1, l).copy_(trace.recorded[l]);
  }
  pool.index_copy_(0, slots_P, ids_PLK);
}

// The step's sequences' DeltaNet states, stacked per layer for the model to read, or (decode
// steps on the CPU) handed out as per-sequence buffers; what the model writes is held until
// commit().
class StepLinearStates : public models::LinearAttentionStates {
 public:
  StepLinearStates(const models::CausalLM& model, const std::vector<StepSequence>& seqs,
                   c10::ScalarType dtype, c10::Device device)
      : seqs_(seqs), staged_(static_cast<size_t>(model.num_layers())), device_(device) {
    const auto& la = model.config().linear_attention;
    zero_window_ = at::zeros({la.conv_channels(), la.conv_kernel - 1},
                             at::TensorOptions().dtype(dtype).device(device));
    zero_state_ = at::zeros({la.num_value_heads, la.key_head_dim, la.value_head_dim},
                            at::TensorOptions().dtype(at::kFloat).device(device));
    for (const auto& s : seqs_) {
      FURLONG_ASSERT(s.linear_state != nullptr,
                     "paged_forward: a DeltaNet model's sequence has no state");
    }
  }
  std::pair<at::Tensor, at::Tensor> read(int64_t layer) const override {
    std::vector<at::Tensor> windows, states;
    for (const auto& s : seqs_) {
      const auto* kept = kept_layer(s, layer);
      windows.push_back(kept && kept->window.defined() ? kept->window : zero_window_);
      states.push_back(kept && kept->state.defined() ? kept->state : zero_state_);
    }
    return {at::stack(windows), at::stack(states)};
  }
  void write(int64_t layer, const at::Tensor& window_BCW, const at::Tensor& state_BHKV) override {
    staged_[static_cast<size_t>(layer)] = {window_BCW, state_BHKV};
  }
  // The decode step reads each sequence's state and writes its spare buffer; commit() swaps
  // them, so a step that fails leaves every state as it was.
  DecodeBuffers decode_buffers(int64_t layer) override {
    if (!device_.is_cpu()) return {};
    DecodeBuffers buffers;
    for (const auto& s : seqs_) {
      auto& kept = *s.linear_state;
      if (static_cast<int64_t>(kept.size()) <= layer) kept.resize(staged_.size());
      auto& l = kept[static_cast<size_t>(layer)];
      if (!l.state.defined()) l.state = zero_state_.clone();  // a one-token prompt
      if (!l.spare.defined()) l.spare = at::empty_like(l.state);
      buffers.from.push_back(l.state);
      buffers.to.push_back(l.spare);
    }
    return buffers;
  }
  void commit() {
    for (size_t i = 0; i < seqs_.size(); ++i) {
      auto& kept = *seqs_[i].linear_state;
      kept.resize(staged_.size());
      for (size_t l = 0; l < staged_.size(); ++l) {
        const auto& [window_BCW, state_BHKV] = staged_[l];
        if (!window_BCW.defined() && !state_BHKV.defined()) continue;  // a softmax layer
        const auto row = static_cast<int64_t>(i);
        if (window_BCW.defined()) kept[l].window = window_BCW[row].clone();
        if (state_BHKV.defined()) {
          kept[l].state = state_BHKV[row].clone();
        } else {
          std::swap(kept[l].state, kept[l].spare);  // the decode step wrote the spare
        }
      }
    }
  }

 private:
  static const LinearLayerState* kept_layer(const StepSequence& s, int64_t layer) {
    const auto& kept = *s.linear_state;
    return static_cast<int64_t>(kept.size()) > layer ? &kept[static_cast<size_t>(layer)] : nullptr;
  }

  std::vector<StepSequence> seqs_;
  std::vector<std::pair<at::Tensor, at::Tensor>> staged_;  // per layer: [B, ...] after the step
  c10::Device device_;
  at::Tensor zero_window_, zero_state_;
};

}  // namespace

at::Tensor paged_forward(const models::CausalLM& model, KvCache& cache,
                         const std::vector<StepSequence>& seqs,
                         const models::ForwardOptions& options,
                         const kernels::PackedWeights* packed, StagedLinearStates* staged) {
  FURLONG_ASSERT(!seqs.empty(), "paged_forward: no sequences");
  const auto& weights = model.weights();
  // Packed tokens, positions, document boundaries and the cache slots of the new tokens.
  std::vector<int64_t> tokens, positions, cu{0}, last_rows;
  std::vector<at::Tensor> new_slots;
  for (const auto& s : seqs) {
    for (int64_t i = 0; i < s.num_new; ++i) {
      tokens.push_back(s.new_tokens[i]);
      positions.push_back(s.start + i);
    }
    cu.push_back(cu.back() + s.num_new);
    last_rows.push_back(cu.back() - 1);
    new_slots.push_back(s.slots.narrow(0, s.start, s.num_new));
  }
  const auto device = weights[0][0].device();
  auto long_opts = at::TensorOptions().dtype(at::kLong);
  models::PackedBatch batch;
  batch.tokens_P = upload(at::tensor(tokens, long_opts), device);
  batch.position_ids_P = upload(at::tensor(positions, long_opts), device);
  batch.cu_seqlens = cu;
  auto slots_P = upload(new_slots.size() == 1 ? new_slots[0] : at::cat(new_slots), device);

  auto x_PD = model.embed(weights[models::CausalLM::kEmbedUnit], batch.tokens_P);
  auto ctx = model.make_context(batch, x_PD.scalar_type(), options);
  ctx.linear_override = [packed](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return kernels::inference_linear(x, w, b, packed);
  };
  ctx.grouped_linear_override = kernels::grouped_inference_linear;
  if (model.config().linear_attention.enabled()) {
    FURLONG_ASSERT(staged != nullptr, "paged_forward: a DeltaNet model needs `staged`");
    auto states = std::make_shared<StepLinearStates>(model, seqs, x_PD.scalar_type(), device);
    ctx.linear_states = states;
    staged->commit = [states] { states->commit(); };
  }
  if (cache.records_routing()) {
    ctx.moe = std::make_shared<models::MoeTrace>();
    ctx.moe->record = true;
  }
  const models::AttnImpl impl = options.attn;
  const int64_t kv0 = cache.first_kv_layer();
  const bool in_place = kv0 >= 0 && impl != models::AttnImpl::kEager &&
                        x_PD.scalar_type() == cache.k(kv0).scalar_type() &&
                        kernels::decode_attention_supported(model.config().num_attention_heads,
                                                            cache.k(kv0), cache.v(kv0));
  const DecodeBatch decodes(seqs, cu, device, in_place);
  ctx.attention_override = [&](int64_t layer, const at::Tensor& q_PNH, const at::Tensor& k_PKH,
                               const at::Tensor& v_PKH, double scale) {
    FURLONG_ASSERT(cache.has_kv(layer), "paged_forward: layer ", layer, " has no K/V pool");
    auto& k_cache = cache.k(layer);
    auto& v_cache = cache.v(layer);
    if (kernels::write_cache_rows_supported(k_cache, slots_P, k_PKH) &&
        kernels::write_cache_rows_supported(v_cache, slots_P, v_PKH)) {
      kernels::write_cache_rows(k_cache, slots_P, k_PKH);
      kernels::write_cache_rows(v_cache, slots_P, v_PKH);
    } else {
      k_cache.index_copy_(0, slots_P, k_PKH);
      v_cache.index_copy_(0, slots_P, v_PKH);
    }
    // A step of decodes only (the steady state): their rows are every packed row, in order.
    if (decodes.every_row) return decodes.attend(q_PNH, k_cache, v_cache, impl, scale);
    auto out_PNH = at::empty_like(q_PNH);
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (decodes.member[i]) continue;
      const auto& s = seqs[i];
      auto q = q_PNH.narrow(0, cu[i], s.num_new);
      at::Tensor o;
      if (s.start == 0) {
        // A whole prompt: the trainer's own per-document causal attention.
        models::PackedBatch doc;
        doc.cu_seqlens = {0, s.num_new};
        o = models::attention(q, k_PKH.narrow(0, cu[i], s.num_new),
                              v_PKH.narrow(0, cu[i], s.num_new), doc, impl, scale);
      } else {
        auto slots = upload(s.slots.narrow(0, 0, s.start + s.num_new), device);
        o = cached_attention(q, k_cache.index_select(0, slots), v_cache.index_select(0, slots),
                             s.start, impl, scale);
      }
      out_PNH.narrow(0, cu[i], s.num_new).copy_(o);
    }
    if (decodes.size > 0) {
      out_PNH.index_copy_(0, decodes.rows_B, decodes.attend(q_PNH, k_cache, v_cache, impl, scale));
    }
    return out_PNH;
  };
  for (int64_t l = 0; l < model.num_layers(); ++l) {
    x_PD = model.block(l, weights[model.layer_unit(l)], x_PD, ctx);
  }
  if (ctx.moe) store_routing(model, cache, *ctx.moe, slots_P);
  auto rows = upload(at::tensor(last_rows, long_opts), device);
  return model.final_norm(weights[model.final_unit()], x_PD.index_select(0, rows), ctx);
}

at::Tensor lm_head_logits(const models::CausalLM& model, const at::Tensor& hidden_BD,
                          const kernels::PackedWeights* packed) {
  const auto& w = model.weights();
  // The same values as the model's lm_head up to summation order (a few ulps; bound in
  // kernels/skinny_linear.h): exact log-probs come from the trainer's scoring path.
  return kernels::inference_linear(
      hidden_BD, model.head_weight(w[models::CausalLM::kEmbedUnit], w[model.final_unit()]), {},
      packed);
}

}  // namespace furlong::engine
