// The one translation unit that includes ProcessGroupNCCL.hpp. Compiled only when
// FURLONG_WITH_NCCL is on (a CUDA libtorch; see src/dist/CMakeLists.txt); CPU builds get the
// stubs in process_group.cpp instead.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <c10/cuda/CUDAFunctions.h>

#include "dist/backends.h"

#ifndef USE_C10D_NCCL
#error "nccl_backend.cpp needs USE_C10D_NCCL (a CUDA build of libtorch with NCCL)"
#endif

namespace furlong::dist::detail {

bool nccl_compiled() {
  return true;
}

int cuda_device_count() {
  return static_cast<int>(c10::cuda::device_count());
}

void set_cuda_device(int index) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
}

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  c10::intrusive_ptr<c10d::Backend> backend =
      c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  return backend;
}

}  // namespace furlong::dist::detail
