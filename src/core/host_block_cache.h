#pragma once
// A caching CPU allocator for large blocks, installed as libtorch's CPU allocator by the
// host-memory policy (core/host_memory.h).
//
// A CPU training step frees and allocates the same large tensors every step (gathered
// parameters, logits, gradients). Returned to the kernel, each comes back as fresh pages that
// the kernel must zero first: about a quarter of a ~100M bf16 FSDP step. This cache keeps freed
// blocks of 2 MiB and more and hands them out again for the same size.
//
// Memory bound (the invariant): the bytes the cache holds live plus free never exceed the
// largest number of live bytes the process has had, so caching never raises peak memory above
// what the same allocations need without it. A request that would cross that line first
// frees cached blocks (largest first). trim() frees every cached block.

#include <c10/core/Allocator.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

namespace furlong {

class HostBlockCache final : public c10::Allocator {
 public:
  static constexpr size_t kMinCachedBytes = 2u << 20;  // smaller blocks pass straight through

  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override;

  struct Stats {
    size_t live_bytes = 0, cached_bytes = 0, peak_live_bytes = 0;
    size_t hits = 0, misses = 0, evictions = 0;
  };
  Stats stats() const;
  void trim();  // frees every cached (not live) block

  // The process-wide instance (never destroyed: tensors may outlive static destructors).
  static HostBlockCache& instance();

 private:
  static void release(void* ptr);
  void give_back(void* ptr);
  void evict_largest_locked();

  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // cached-class blocks handed out: size
  std::multimap<size_t, void*> free_;       // cached blocks by size
  Stats stats_;
};

// Makes HostBlockCache::instance() libtorch's CPU allocator (for allocations made after it).
void install_host_block_cache();

}  // namespace furlong
