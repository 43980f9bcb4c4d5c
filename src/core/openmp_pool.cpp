#include "core/openmp_pool.h"

#include <dlfcn.h>

namespace furlong {
namespace {

// omp_pause_resource_t's omp_pause_soft (OpenMP 5.0, 3.2.43); libgomp treats both kinds alike.
constexpr int kOmpPauseSoft = 1;
using PauseAll = int (*)(int);

PauseAll pause_all() {
  // The symbol of the OpenMP runtime already in the process (ATen's), not one linked here:
  // core builds without -fopenmp and links no OpenMP runtime of its own.
  static const PauseAll fn =
      reinterpret_cast<PauseAll>(dlsym(RTLD_DEFAULT, "omp_pause_resource_all"));
  return fn;
}

}  // namespace

bool release_openmp_pool_of_this_thread() {
  const PauseAll fn = pause_all();
  return fn != nullptr && fn(kOmpPauseSoft) == 0;
}

}  // namespace furlong
