// bf16 weights kept in oneDNN's own GEMM layout ("prepacked"), for the rollout engine's GEMMs
// of 8 input rows and more on CPUs whose oneDNN runs bf16 on AMX tiles. at::linear hands oneDNN
// the weight in PyTorch's [F, D] layout, and oneDNN reorders it into its blocked layout on every
// call: one more read and write of every weight per GEMM. A weight reordered once at load costs
// a second copy of its bytes and saves that pass; the GEMM itself is oneDNN's same kernel, so
// the outputs equal at::linear's up to the summation order oneDNN picks for each layout.
// PackedLinear.DISABLED_ReportThroughput times it against at::linear over a model's weights
// (figures: docs/results/2026-12-07-engine.md).
//
// Shapes (legend in docs/architecture.md): M = input rows, D = input width, F = output width.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <unordered_map>

namespace furlong::kernels {

// Whether this libtorch has oneDNN's prepacking ops (mkldnn::_reorder_linear_weight and
// mkldnn::_linear_pointwise) and oneDNN is enabled.
bool packed_linear_available();

// Whether `w_FD` is a weight worth packing: a 2-D contiguous bf16 CPU tensor of 1M elements or
// more (the dense layers and the vocabulary head; an MoE expert's small projections are not).
bool packed_linear_wants(const at::Tensor& w_FD);

// The weight in oneDNN's layout (an opaque mkldnn tensor of the same shape and dtype).
at::Tensor pack_linear_weight(const at::Tensor& w_FD);

// oneDNN's linear (mkldnn::_linear_pointwise) through the dispatcher, boxed so that no C++
// signature ties it to one libtorch version: w_FD plain (oneDNN reorders it per call) or packed.
// inference_linear uses it for fp32 weights. Available: the op exists and oneDNN is enabled.
bool onednn_linear_available();
at::Tensor onednn_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F);

// y = x W^T (+ b) against a packed weight: x_MD a 2-D bf16 CPU tensor, b_F undefined or [F].
at::Tensor packed_linear(const at::Tensor& x_MD, const at::Tensor& packed_FD,
                         const at::Tensor& b_F);

// The packed copies of a model's weights, found by the weight tensor they were packed from. A
// copy answers only while that tensor still holds the same storage and shape it was packed from;
// whoever writes into a packed weight (a weight update) packs it again (`pack`), or the copy
// would be stale. Not thread-safe: the engine packs with its scheduler held, between steps.
class PackedWeights {
 public:
  // Packs `w_FD` (replacing an earlier copy of the same tensor) if packed_linear_wants it.
  void pack(const at::Tensor& w_FD);
  void clear();
  // The packed copy of `w_FD`, or null when there is none or it no longer matches w_FD.
  const at::Tensor* find(const at::Tensor& w_FD) const;
  int64_t count() const { return static_cast<int64_t>(entries_.size()); }
  int64_t bytes() const;

 private:
  struct Entry {
    const void* data = nullptr;  // w_FD's data pointer when packed
    int64_t rows = 0, cols = 0;
    at::Tensor packed;
  };
  std::unordered_map<const void*, Entry> entries_;  // by w_FD's TensorImpl
};

// Whether the engine should pack its weights by default: bf16 on a CPU whose oneDNN runs bf16
// GEMMs on AMX tiles (core/dtype.h cpu_has_amx_bf16), with packed_linear_available().
bool packed_linear_pays_off(c10::ScalarType dtype, const c10::Device& device);

}  // namespace furlong::kernels
