// Frees the calling thread's OpenMP worker pool.
//
// Why: libgomp keeps a pool of worker threads for every thread that has run a parallel region
// (core/fresh_thread.h explains the cost): once the pools together hold more threads than the
// process has CPUs, every parallel region anywhere in the process pays a kernel wake-up. A
// trainer thread that hands the CPUs to a colocated engine for a rollout calls this first, so
// that the engine's scheduler owns the only pool while it decodes. The pool comes back by
// itself at the thread's next parallel region (one thread start per worker).
#pragma once

namespace furlong {

// OpenMP 5.0's omp_pause_resource_all on the host, looked up at run time in the OpenMP runtime
// ATen loaded (libgomp frees the calling thread's pool and its count of managed threads).
// Returns false, and does nothing, when the runtime lacks the call, when the caller is inside a
// parallel region, or when the runtime refuses.
bool release_openmp_pool_of_this_thread();

}  // namespace furlong
