// The host-memory policy (src/core/host_memory.h): what it sets, and that a user's own
// settings and the opt-out win.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/host_block_cache.h"
#include "core/host_memory.h"

namespace furlong {
namespace {

// Sets (or unsets, with nullopt) environment variables for one test and restores them.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(HostMemory, TurnsOnHugePagesAndFixesTheMmapThresholdByDefault) {
  ScopedEnv opt_out("FURLONG_HOST_MEMORY", std::nullopt);
  ScopedEnv thp("THP_MEM_ALLOC_ENABLE", std::nullopt);
  ScopedEnv mmap("MALLOC_MMAP_THRESHOLD_", std::nullopt);
  ScopedEnv trim("MALLOC_TRIM_THRESHOLD_", std::nullopt);
  auto policy = apply_host_memory_policy();
  ASSERT_NE(std::getenv("THP_MEM_ALLOC_ENABLE"), nullptr);
  EXPECT_EQ(std::string(std::getenv("THP_MEM_ALLOC_ENABLE")), "1");
  EXPECT_TRUE(policy.huge_pages);
  EXPECT_EQ(policy.mmap_threshold, 2L * 1024 * 1024);
  EXPECT_EQ(policy.trim_threshold, 64L * 1024 * 1024);
  EXPECT_TRUE(policy.block_cache);
  EXPECT_EQ(policy.describe(),
            "huge pages on, mmap threshold 2097152 B, trim threshold 67108864 B, block cache on");
}

// Under the policy a freed heap block just below the mmap threshold stays with the process:
// with glibc's 128 KiB trim threshold (what fixing the mmap threshold leaves) the free at the
// top of the heap would hand its pages back, and the next step would fault them in again.
TEST(HostMemory, FreeingAHeapBlockKeepsItsPages) {
  ScopedEnv opt_out("FURLONG_HOST_MEMORY", std::nullopt);
  ScopedEnv mmap("MALLOC_MMAP_THRESHOLD_", std::nullopt);
  ScopedEnv trim("MALLOC_TRIM_THRESHOLD_", std::nullopt);
  apply_host_memory_policy();
  void* (*volatile allocate)(size_t) = std::malloc;  // volatile: the pair cannot be elided
  void (*volatile release)(void*) = std::free;
  const size_t size = (1u << 21) - (64u << 10);  // under the 2 MiB mmap threshold: a heap block
  auto* block = static_cast<char*>(allocate(size));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, size);
  const size_t heap_with_block = mallinfo2().arena;
  release(block);
  EXPECT_GE(mallinfo2().arena + (1u << 20), heap_with_block)
      << "the heap shrank by more than 1 MiB when the block was freed";
}

TEST(HostMemory, KeepsTheUsersOwnSettings) {
  ScopedEnv opt_out("FURLONG_HOST_MEMORY", std::nullopt);
  ScopedEnv thp("THP_MEM_ALLOC_ENABLE", "0");
  ScopedEnv mmap("MALLOC_MMAP_THRESHOLD_", "1048576");
  ScopedEnv trim("MALLOC_TRIM_THRESHOLD_", "4194304");
  auto policy = apply_host_memory_policy();
  EXPECT_EQ(std::string(std::getenv("THP_MEM_ALLOC_ENABLE")), "0");
  EXPECT_FALSE(policy.huge_pages);
  EXPECT_EQ(policy.mmap_threshold, 1048576);
  EXPECT_EQ(policy.trim_threshold, 4194304);
}

TEST(HostMemory, DefaultOptOutLeavesTheLibrariesAlone) {
  ScopedEnv opt_out("FURLONG_HOST_MEMORY", "default");
  ScopedEnv thp("THP_MEM_ALLOC_ENABLE", std::nullopt);
  ScopedEnv mmap("MALLOC_MMAP_THRESHOLD_", std::nullopt);
  ScopedEnv trim("MALLOC_TRIM_THRESHOLD_", std::nullopt);
  auto policy = apply_host_memory_policy();
  EXPECT_EQ(std::getenv("THP_MEM_ALLOC_ENABLE"), nullptr);
  EXPECT_FALSE(policy.huge_pages);
  EXPECT_EQ(policy.mmap_threshold, 0);
  EXPECT_FALSE(policy.block_cache);
  EXPECT_EQ(policy.describe(),
            "huge pages off, mmap threshold glibc default, trim threshold glibc default, block "
            "cache off");
}

constexpr size_t kMiB = 1u << 20;

TEST(HostBlockCache, ReusesAFreedBlockOfTheSameSize) {
  // DataPtr deleters hand blocks back to the process-wide instance, so the test uses it.
  auto& cache = HostBlockCache::instance();
  cache.trim();
  void* p = nullptr;
  {
    auto b = cache.allocate(8 * kMiB);
    p = b.get();
    ASSERT_NE(p, nullptr);
  }
  const auto before = cache.stats();
  EXPECT_EQ(before.cached_bytes, 8 * kMiB);
  auto c = cache.allocate(8 * kMiB);
  EXPECT_EQ(c.get(), p);
  EXPECT_EQ(cache.stats().hits, before.hits + 1);
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
  auto d = cache.allocate(8 * kMiB + 4096);  // another size is a fresh block
  EXPECT_NE(d.get(), p);
}

TEST(HostBlockCache, NeverHoldsMoreThanThePeakLiveBytes) {
  auto& cache = HostBlockCache::instance();
  cache.trim();
  const size_t base_live = cache.stats().live_bytes;
  // Sizes that never repeat: without the bound every freed block would stay cached.
  for (size_t i = 0; i < 40; ++i) {
    auto a = cache.allocate((3 + i % 13) * kMiB + i * 4096);
    auto b = cache.allocate((5 + i % 7) * kMiB + i * 8192);
    const auto s = cache.stats();
    EXPECT_LE(s.live_bytes + s.cached_bytes, std::max(s.peak_live_bytes, base_live)) << i;
  }
  const auto s = cache.stats();
  EXPECT_LE(s.live_bytes + s.cached_bytes, s.peak_live_bytes);
  EXPECT_GT(s.evictions, 0u);
  cache.trim();
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
}

TEST(HostBlockCache, SmallBlocksAndRawAllocationsWork) {
  auto& cache = HostBlockCache::instance();
  const auto before = cache.stats();
  auto small = cache.allocate(1024);
  ASSERT_NE(small.get(), nullptr);
  std::memset(small.get(), 1, 1024);
  EXPECT_EQ(cache.stats().live_bytes, before.live_bytes);  // not cached, not counted
  void* raw = cache.raw_allocate(4 * kMiB);
  std::memset(raw, 2, 4 * kMiB);
  cache.raw_deallocate(raw);
  EXPECT_EQ(cache.stats().live_bytes, before.live_bytes);
}

TEST(HostBlockCache, TensorsFromManyThreadsKeepTheirValues) {
  install_host_block_cache();
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &bad] {
      for (int i = 0; i < 25; ++i) {
        auto x = at::full({(1 << 19) + 1024 * (i % 3)}, static_cast<float>(t * 100 + i));
        auto y = at::empty_like(x).copy_(x);
        if (!at::equal(x, y) || y[7].item<float>() != static_cast<float>(t * 100 + i)) ++bad[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_GT(HostBlockCache::instance().stats().hits, 0u);
}

}  // namespace
}  // namespace furlong
