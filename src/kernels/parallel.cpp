#include "kernels/parallel.h"

#include <ATen/Parallel.h>

namespace furlong::kernels {

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  at::parallel_for(begin, end, grain, fn);
}

}  // namespace furlong::kernels
