#include "core/host_memory.h"

#include "core/host_block_cache.h"

#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace furlong {
namespace {

constexpr long kLargeBlock = 2L * 1024 * 1024;  // the x86-64 huge-page size
// Free bytes glibc may keep at the top of a heap. Fixing the mmap threshold turns off glibc's
// own adjustment of both thresholds, which would otherwise leave the trim threshold at 128 KiB:
// every free at the top of the heap then hands the pages back, and the next step faults them in
// again (a Qwen3-0.6B bf16 generate benchmark at batch 64: half the system time with 64 MiB).
constexpr long kTrimThreshold = 64L * 1024 * 1024;

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

}  // namespace

std::string HostMemoryPolicy::describe() const {
  auto bytes = [](long v) { return v > 0 ? std::to_string(v) + " B" : "glibc default"; };
  return std::string("huge pages ") + (huge_pages ? "on" : "off") + ", mmap threshold " +
         bytes(mmap_threshold) + ", trim threshold " + bytes(trim_threshold) + ", block cache " +
         (block_cache ? "on" : "off");
}

HostMemoryPolicy apply_host_memory_policy() {
  HostMemoryPolicy p;
  if (!env_is("FURLONG_HOST_MEMORY", "default")) {
    setenv("THP_MEM_ALLOC_ENABLE", "1", /*overwrite=*/0);
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr &&
        mallopt(M_MMAP_THRESHOLD, static_cast<int>(kLargeBlock)) == 1) {
      p.mmap_threshold = kLargeBlock;
    }
    if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr &&
        mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThreshold)) == 1) {
      p.trim_threshold = kTrimThreshold;
    }
    install_host_block_cache();
    p.block_cache = true;
  }
  p.huge_pages = env_is("THP_MEM_ALLOC_ENABLE", "1");
  if (const char* t = std::getenv("MALLOC_MMAP_THRESHOLD_")) p.mmap_threshold = std::atol(t);
  if (const char* t = std::getenv("MALLOC_TRIM_THRESHOLD_")) p.trim_threshold = std::atol(t);
  return p;
}

HostMemoryPolicy configure_host_memory() {
  static const HostMemoryPolicy policy = apply_host_memory_policy();
  return policy;
}

}  // namespace furlong

namespace furlong {
namespace {

// A "Name:   123 kB" field of /proc/meminfo in bytes, or -1.
int64_t meminfo_field(const std::string& name) {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == name + ":") return value * 1024;
  }
  return -1;
}

// The first integer in `path`, or -1 when the file is missing or says "max".
int64_t file_integer(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text[0] < '0' || text[0] > '9') return -1;
  return std::stoll(text);
}

}  // namespace

HostMemoryInfo host_memory_info() {
  HostMemoryInfo info;
  info.total_bytes = meminfo_field("MemTotal");
  info.available_bytes = meminfo_field("MemAvailable");
  struct Cgroup {
    const char* limit;
    const char* usage;
  };
  for (const Cgroup& cg : {Cgroup{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                           Cgroup{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const int64_t limit = file_integer(cg.limit);
    // cgroup v1 writes "no limit" as a huge page-aligned number: anything above MemTotal.
    if (limit <= 0 || limit >= info.total_bytes) continue;
    info.total_bytes = limit;
    const int64_t usage = std::max<int64_t>(file_integer(cg.usage), 0);
    info.available_bytes = std::min(info.available_bytes, std::max<int64_t>(limit - usage, 0));
    break;
  }
  return info;
}

}  // namespace furlong
