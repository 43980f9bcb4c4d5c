#include "kernels/parallel.h"

#include <ATen/Parallel.h>

namespace furlong::kernels {

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  // A lambda of this file's own type: an at::parallel_for<std::function<...>> instantiated in a
  // file built without -fopenmp could otherwise be the copy the linker keeps.
  at::parallel_for(begin, end, grain, [&fn](int64_t b0, int64_t b1) { fn(b0, b1); });
}

}  // namespace furlong::kernels
