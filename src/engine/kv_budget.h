// Sizing the KV cache to the machine, as SGLang's --mem-fraction-static does: the weights and
// the KV cache together may use `mem_fraction_static` of the device's memory, and the cache
// must also fit in what is free once the weights are loaded, keeping (1 - fraction) of the
// total for everything else (activations, logits, a colocated trainer, other processes):
//
//   kv_bytes = min(fraction * total - weights, available_after_weights - (1 - fraction) * total)
//              - reserved
//
// where `reserved` is what the running sequences hold outside the blocks: the DeltaNet states
// of hybrid models (max_running_requests of them).
//
// max_total_tokens = 0 takes the largest cache this allows (whole blocks, at most what
// max_running_requests sequences of context_length tokens could ever reserve); an explicit
// value is honoured if it fits in the memory available after the weights.
#pragma once

#include <cstdint>
#include <string>

#include "core/device_memory.h"

namespace furlong::engine {

struct KvBudgetInput {
  DeviceMemory memory;             // measured after the weights were loaded
  int64_t weight_bytes = 0;        // the loaded weights
  double mem_fraction_static = 0;  // (0, 1]
  int64_t requested_tokens = 0;    // --max-total-tokens (0 = automatic)
  int64_t reserved_bytes = 0;      // held beside the blocks (DeltaNet states), >= 0
  int64_t bytes_per_token = 0;     // K and V of all layers
  int64_t block_size = 16;
  int64_t max_useful_tokens = 0;  // max_running_requests * context_length (rounded to blocks)
  std::string dtype;              // for the messages
};

struct KvBudget {
  int64_t num_blocks = 0;
  int64_t bytes = 0;
  bool automatic = false;
};

// Fails (furlong::Error naming --mem-fraction-static, --max-total-tokens and --dtype, with the
// bytes needed and available) when the model or the requested cache does not fit.
KvBudget plan_kv_cache(const KvBudgetInput& in);

// The default fraction on a device: 0.85 on CUDA; 0.7 on CPU (the host also holds the
// process's activations, logits and, colocated, the trainer).
double default_mem_fraction_static(bool cuda);

// "1.23 GB" (10^9 bytes).
std::string format_gb(int64_t bytes);

}  // namespace furlong::engine
