// oneDNN's prepacked bf16 GEMM, reached through the dispatcher (boxed, so no C++ signature is
// tied to one libtorch version), and the engine's table of packed weights.
#include "kernels/packed_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace furlong::kernels {
namespace {

constexpr int64_t kMinPackedElements = int64_t{1} << 20;

const c10::OperatorHandle* find_op(const char* name) {
  auto op = c10::Dispatcher::singleton().findSchema({name, ""});
  return op ? new c10::OperatorHandle(*op) : nullptr;  // lives for the process, as the op
}

const c10::OperatorHandle* reorder_op() {
  static const c10::OperatorHandle* op = find_op("mkldnn::_reorder_linear_weight");
  return op;
}

const c10::OperatorHandle* linear_op() {
  static const c10::OperatorHandle* op = find_op("mkldnn::_linear_pointwise");
  return op;
}

}  // namespace

bool packed_linear_available() {
  return reorder_op() != nullptr && linear_op() != nullptr &&
         at::globalContext().userEnabledMkldnn();
}

bool packed_linear_wants(const at::Tensor& w_FD) {
  // An opaque (already packed) tensor first: it has no strides to ask about.
  return w_FD.defined() && !w_FD.is_mkldnn() && w_FD.dim() == 2 && w_FD.is_cpu() &&
         w_FD.is_contiguous() && w_FD.scalar_type() == at::kBFloat16 &&
         w_FD.numel() >= kMinPackedElements;
}

at::Tensor pack_linear_weight(const at::Tensor& w_FD) {
  FURLONG_CHECK(packed_linear_available(), "pack_linear_weight: this libtorch has no oneDNN ",
                "prepacking ops (mkldnn::_reorder_linear_weight)");
  FURLONG_CHECK(packed_linear_wants(w_FD),
                "pack_linear_weight: expected a 2-D contiguous bf16 CPU ", "weight of at least ",
                kMinPackedElements, " elements, got ", w_FD.sizes(), " ", w_FD.scalar_type());
  torch::jit::Stack stack;
  stack.emplace_back(w_FD);
  stack.emplace_back(c10::IValue());  // no batch-size hint: one layout for every row count
  reorder_op()->callBoxed(&stack);
  return stack.back().toTensor();
}

bool onednn_linear_available() {
  return linear_op() != nullptr && at::globalContext().userEnabledMkldnn();
}

at::Tensor onednn_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F) {
  torch::jit::Stack stack;
  stack.emplace_back(x_MD);
  stack.emplace_back(w_FD);
  stack.emplace_back(b_F.defined() ? c10::IValue(b_F) : c10::IValue());
  stack.emplace_back(std::string("none"));
  stack.emplace_back(c10::List<std::optional<c10::Scalar>>());
  stack.emplace_back(std::string(""));
  linear_op()->callBoxed(&stack);
  return stack.back().toTensor();
}

at::Tensor packed_linear(const at::Tensor& x_MD, const at::Tensor& packed_FD,
                         const at::Tensor& b_F) {
  FURLONG_CHECK(x_MD.dim() == 2 && x_MD.is_cpu() && x_MD.scalar_type() == at::kBFloat16 &&
                    x_MD.size(1) == packed_FD.size(1),
                "packed_linear: expected bf16 CPU input [M, ", packed_FD.size(1), "], got ",
                x_MD.sizes(), " ", x_MD.scalar_type());
  return onednn_linear(x_MD.contiguous(), packed_FD, b_F);
}

void PackedWeights::pack(const at::Tensor& w_FD) {
  const void* key = w_FD.defined() ? w_FD.unsafeGetTensorImpl() : nullptr;
  entries_.erase(key);
  if (!packed_linear_wants(w_FD)) return;
  entries_[key] = Entry{w_FD.data_ptr(), w_FD.size(0), w_FD.size(1), pack_linear_weight(w_FD)};
}

void PackedWeights::clear() {
  entries_.clear();
}

const at::Tensor* PackedWeights::find(const at::Tensor& w_FD) const {
  if (entries_.empty() || !w_FD.defined() || w_FD.dim() != 2) return nullptr;
  auto it = entries_.find(w_FD.unsafeGetTensorImpl());
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  const bool same = e.data == w_FD.data_ptr() && e.rows == w_FD.size(0) && e.cols == w_FD.size(1) &&
                    w_FD.scalar_type() == at::kBFloat16;
  return same ? &e.packed : nullptr;
}

int64_t PackedWeights::bytes() const {
  int64_t total = 0;
  for (const auto& [key, e] : entries_) total += e.rows * e.cols * 2;
  return total;
}

bool packed_linear_pays_off(c10::ScalarType dtype, const c10::Device& device) {
  return dtype == at::kBFloat16 && device.is_cpu() && cpu_has_amx_bf16() &&
         packed_linear_available();
}

}  // namespace furlong::kernels
