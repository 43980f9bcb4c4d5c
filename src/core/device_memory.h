// How much memory the engine's device has, for sizing the KV cache (engine.cpp, load).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace furlong {

struct DeviceMemory {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;  // free now (CPU: MemAvailable / cgroup; CUDA: cudaMemGetInfo)
};

// CPU: host memory (core/host_memory.h). CUDA: the device's free and total memory after
// returning the caching allocator's unused blocks; only in a CUDA build (an error otherwise).
DeviceMemory device_memory(c10::Device device);

// Hands memory the engine freed back to its owner: CUDA, the caching allocator's unused blocks
// go back to the device (so other processes, e.g. a colocated trainer, can use them); CPU,
// nothing to do here (the host block cache is trimmed by the caller).
void return_freed_memory(c10::Device device);

}  // namespace furlong
