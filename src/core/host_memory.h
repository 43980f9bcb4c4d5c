#pragma once
// Host-memory policy of furlong's processes, applied first thing in main().
//
// On CPU the big tensors of a step (gathered parameters, logits, gradients) are allocated and
// freed every step. With glibc's defaults each one is a fresh mmap whose 4 KiB pages fault in
// one by one, a visible share of an FSDP step on CPU (bench/results/fsdp_bench.json).
// furlong therefore asks libtorch for transparent huge pages on allocations of 2 MiB and more
// (THP_MEM_ALLOC_ENABLE=1, read by c10 at its first large allocation) and fixes glibc's mmap
// threshold at 2 MiB, so large blocks go back to the kernel on free (no heap growth) and come
// back as huge pages (one fault per 2 MiB). Smaller blocks stay on glibc's heaps, which keep up
// to 64 MiB free at their top (M_TRIM_THRESHOLD) instead of returning pages on every free.
//
// Freed blocks of 2 MiB and more are kept by a caching allocator (core/host_block_cache.h) and
// reused for the same size, so most steps fault and zero no fresh pages at all; the cache never
// holds more than the process's peak live bytes.
//
// A value the user already set for THP_MEM_ALLOC_ENABLE, MALLOC_MMAP_THRESHOLD_ or
// MALLOC_TRIM_THRESHOLD_ is kept; FURLONG_HOST_MEMORY=default leaves both libraries at their own
// defaults (and no cache).

#include <cstdint>
#include <string>

namespace furlong {

struct HostMemoryPolicy {
  bool huge_pages = false;       // THP_MEM_ALLOC_ENABLE is 1 for this process
  long mmap_threshold = 0;       // bytes; 0 when glibc's dynamic default applies
  long trim_threshold = 0;       // bytes; 0 when glibc's dynamic default applies
  bool block_cache = false;      // HostBlockCache is libtorch's CPU allocator
  std::string describe() const;  // one line for logs and benchmark JSON
};

// Must run before the first tensor allocation of the process; applies the policy once and
// returns it on every call.
HostMemoryPolicy configure_host_memory();

// Applies the policy from the current environment now (what configure_host_memory runs once;
// exposed for tests).
HostMemoryPolicy apply_host_memory_policy();

}  // namespace furlong

namespace furlong {

// The memory of this machine as the process may use it: the smaller of the physical memory
// (/proc/meminfo) and this process's cgroup limit (v2 memory.max, v1 limit_in_bytes).
struct HostMemoryInfo {
  int64_t total_bytes = 0;      // MemTotal, or the cgroup limit when lower
  int64_t available_bytes = 0;  // MemAvailable, or the cgroup limit minus its usage when lower
};
HostMemoryInfo host_memory_info();

}  // namespace furlong
