// Full (unsharded) weights streamed from a trainer to whoever consumes them (the rollout
// engines), in buckets of named tensors in model order. The two sides only share these types:
// the backend is a WeightSource, the engines' weight sync a WeightSink.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace furlong {

using WeightBucket = std::vector<std::pair<std::string, at::Tensor>>;
using WeightSink = std::function<void(const WeightBucket&)>;
// Streams the current weights to `sink`, bucket by bucket (collective where the source is).
using WeightSource = std::function<void(const WeightSink&)>;

}  // namespace furlong
