#include "core/host_block_cache.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <cstring>

namespace furlong {

c10::DataPtr HostBlockCache::allocate(size_t n) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (n < kMinCachedBytes) {
    void* p = c10::alloc_cpu(n);
    return {p, p, &release, cpu};
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = free_.find(n); it != free_.end()) {
    void* p = it->second;
    free_.erase(it);
    stats_.cached_bytes -= n;
    stats_.live_bytes += n;
    ++stats_.hits;
    live_.emplace(p, n);
    return {p, p, &release, cpu};
  }
  // A fresh block: first make room so that live + cached stays within the peak.
  const size_t peak = std::max(stats_.peak_live_bytes, stats_.live_bytes + n);
  while (!free_.empty() && stats_.live_bytes + stats_.cached_bytes + n > peak) {
    evict_largest_locked();
  }
  ++stats_.misses;
  // Allocated under the lock, so no other thread can cache a block in between and break the
  // bound. alloc_cpu may throw on out-of-memory; nothing is recorded then.
  void* p = c10::alloc_cpu(n);
  live_.emplace(p, n);
  stats_.live_bytes += n;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  return {p, p, &release, cpu};
}

void HostBlockCache::copy_data(void* dest, const void* src, size_t count) const {
  std::memcpy(dest, src, count);
}

void HostBlockCache::release(void* ptr) {
  instance().give_back(ptr);
}

void HostBlockCache::give_back(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it != live_.end()) {
      const size_t n = it->second;
      live_.erase(it);
      stats_.live_bytes -= n;
      stats_.cached_bytes += n;
      free_.emplace(n, ptr);
      return;
    }
  }
  c10::free_cpu(ptr);  // a small block (or one from before the cache): not ours to keep
}

void HostBlockCache::evict_largest_locked() {
  auto it = std::prev(free_.end());
  stats_.cached_bytes -= it->first;
  ++stats_.evictions;
  c10::free_cpu(it->second);
  free_.erase(it);
}

HostBlockCache::Stats HostBlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void HostBlockCache::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!free_.empty()) evict_largest_locked();
}

HostBlockCache& HostBlockCache::instance() {
  static auto* cache = new HostBlockCache();  // intentionally leaked, see the header
  return *cache;
}

void install_host_block_cache() {
  static const bool installed = [] {
    c10::SetCPUAllocator(&HostBlockCache::instance(), /*priority=*/1);
    return true;
  }();
  (void)installed;
}

}  // namespace furlong
