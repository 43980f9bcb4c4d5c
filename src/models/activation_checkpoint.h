// Activation checkpointing for one block: the forward runs without saving activations; the
// backward re-runs the block with autograd on and differentiates it. Gradients flow to the
// input and to every parameter tensor passed in (leaf or not), so callers may pass gathered or
// otherwise derived parameter tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace furlong::models {

using BlockFn = std::function<at::Tensor(const at::Tensor& x, const std::vector<at::Tensor>& p)>;

// Requires fn to be deterministic (no dropout / RNG), which holds for furlong's models.
at::Tensor checkpointed_call(BlockFn fn, const at::Tensor& x,
                             const std::vector<at::Tensor>& params);

// The same for a block with several outputs (e.g. a sparse layer's router probabilities next to
// its hidden states); every output gets autograd history, and outputs that receive no
// gradient in backward are skipped.
using MultiBlockFn =
    std::function<std::vector<at::Tensor>(const at::Tensor& x, const std::vector<at::Tensor>& p)>;
std::vector<at::Tensor> checkpointed_call_multi(MultiBlockFn fn, const at::Tensor& x,
                                                const std::vector<at::Tensor>& params);

}  // namespace furlong::models
