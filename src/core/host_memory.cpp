#include "core/host_memory.h"

#include "core/host_block_cache.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace furlong {
namespace {

constexpr long kLargeBlock = 2L * 1024 * 1024;  // the x86-64 huge-page size

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

}  // namespace

std::string HostMemoryPolicy::describe() const {
  return std::string("huge pages ") + (huge_pages ? "on" : "off") + ", mmap threshold " +
         (mmap_threshold > 0 ? std::to_string(mmap_threshold) + " B" : "glibc default") +
         ", block cache " + (block_cache ? "on" : "off");
}

HostMemoryPolicy apply_host_memory_policy() {
  HostMemoryPolicy p;
  if (!env_is("FURLONG_HOST_MEMORY", "default")) {
    setenv("THP_MEM_ALLOC_ENABLE", "1", /*overwrite=*/0);
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr &&
        mallopt(M_MMAP_THRESHOLD, static_cast<int>(kLargeBlock)) == 1) {
      p.mmap_threshold = kLargeBlock;
    }
    install_host_block_cache();
    p.block_cache = true;
  }
  p.huge_pages = env_is("THP_MEM_ALLOC_ENABLE", "1");
  if (const char* t = std::getenv("MALLOC_MMAP_THRESHOLD_")) p.mmap_threshold = std::atol(t);
  return p;
}

HostMemoryPolicy configure_host_memory() {
  static const HostMemoryPolicy policy = apply_host_memory_policy();
  return policy;
}

}  // namespace furlong
