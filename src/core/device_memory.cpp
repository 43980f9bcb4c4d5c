#include "core/device_memory.h"

#ifdef FURLONG_CORE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

#include "core/error.h"
#include "core/host_memory.h"

namespace furlong {

DeviceMemory device_memory(c10::Device device) {
  if (device.is_cpu()) {
    auto host = host_memory_info();
    return {host.total_bytes, host.available_bytes};
  }
#ifdef FURLONG_CORE_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device);
    c10::cuda::CUDACachingAllocator::emptyCache();
    size_t free_bytes = 0, total_bytes = 0;
    FURLONG_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess,
                  "engine: cudaMemGetInfo failed on ", device.str());
    return {static_cast<int64_t>(total_bytes), static_cast<int64_t>(free_bytes)};
  }
#endif
  FURLONG_FAIL("engine: cannot measure the memory of device ", device.str(),
               " in this build; pass --max-total-tokens explicitly");
}

void return_freed_memory(c10::Device device) {
#ifdef FURLONG_CORE_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#else
  (void)device;
#endif
}

}  // namespace furlong
