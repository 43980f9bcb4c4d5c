// at::parallel_for for the files outside this folder. ATen's OpenMP parallel_for is inline in
// its headers, so in a file compiled without -fopenmp (every file that shares furlong's
// precompiled header) it silently runs on one thread. This one is compiled with -fopenmp.
#pragma once

#include <cstdint>
#include <functional>

namespace furlong::kernels {

// fn(b0, b1) over consecutive chunks of [begin, end), as at::parallel_for splits them (at most
// at::get_num_threads() chunks of at least `grain` items; one call on the calling thread when
// the range is that small or the caller already runs inside a parallel region). Exceptions
// thrown by fn reach the caller.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace furlong::kernels
