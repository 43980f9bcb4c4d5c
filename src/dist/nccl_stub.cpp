// NCCL entry points for builds without FURLONG_WITH_NCCL (a CPU-only libtorch): NCCL is never
// available, so ProcessGroups::init reports a clear error before any of these could be reached.
#include "core/error.h"
#include "dist/backends.h"

namespace furlong::dist::detail {

bool nccl_compiled() {
  return false;
}

int cuda_device_count() {
  return 0;
}

void set_cuda_device(int index) {
  FURLONG_ASSERT(false, "set_cuda_device(", index, ") in a build without NCCL");
}

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                    int, std::chrono::milliseconds) {
  FURLONG_FAIL("dist: this furlong build has no NCCL support (CPU-only libtorch)");
}

}  // namespace furlong::dist::detail
