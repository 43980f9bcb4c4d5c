// Runs CPU tensor work on a thread that exits when the work is done.
//
// Why: libgomp (ATen's OpenMP runtime) keeps a pool of worker threads for every thread that
// has started a parallel region, for as long as that thread lives, and once the pools together
// hold more threads than the process has CPUs, every waiting worker spins only ~100 times
// before sleeping in the kernel. Each later parallel region then pays a kernel wake-up, far
// more than a region costs when one thread owns the only pool
// (OpenmpPool.DISABLED_ReportRegionCostWithAndWithoutASecondPool). The rollout engine starts a
// few hundred parallel regions per decode step, so a model loaded on the caller's thread (which
// then lives on, holding its pool) slows decode.
// Work done here leaves no pool behind: the thread's pool goes when the thread exits. The engine
// runs its load and its control operations (weight updates, release/resume, digests, prompt
// log-probs: called from HTTP handler or trainer threads) this way.
#pragma once

#include <exception>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace furlong {

// Calls fn on a new thread, waits for it and returns its result; rethrows what fn threw.
// Thread-local state (InferenceMode, grad mode, the current CUDA device) starts at its defaults
// there: fn sets what it needs.
template <class Fn>
auto run_on_fresh_thread(Fn&& fn) -> decltype(fn()) {
  using Result = decltype(fn());
  std::exception_ptr error;
  if constexpr (std::is_void_v<Result>) {
    std::thread worker([&] {
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
      }
    });
    worker.join();
    if (error) std::rethrow_exception(error);
  } else {
    std::optional<Result> result;
    std::thread worker([&] {
      try {
        result.emplace(fn());
      } catch (...) {
        error = std::current_exception();
      }
    });
    worker.join();
    if (error) std::rethrow_exception(error);
    return std::move(*result);
  }
}

}  // namespace furlong
