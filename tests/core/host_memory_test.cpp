// The host-memory policy (src/core/host_memory.h): what it sets, and that a user's own
// settings and the opt-out win.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

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
  auto policy = apply_host_memory_policy();
  ASSERT_NE(std::getenv("THP_MEM_ALLOC_ENABLE"), nullptr);
  EXPECT_EQ(std::string(std::getenv("THP_MEM_ALLOC_ENABLE")), "1");
  EXPECT_TRUE(policy.huge_pages);
  EXPECT_EQ(policy.mmap_threshold, 2L * 1024 * 1024);
  EXPECT_EQ(policy.describe(), "huge pages on, mmap threshold 2097152 B");
}

TEST(HostMemory, KeepsTheUsersOwnSettings) {
  ScopedEnv opt_out("FURLONG_HOST_MEMORY", std::nullopt);
  ScopedEnv thp("THP_MEM_ALLOC_ENABLE", "0");
  ScopedEnv mmap("MALLOC_MMAP_THRESHOLD_", "1048576");
  auto policy = apply_host_memory_policy();
  EXPECT_EQ(std::string(std::getenv("THP_MEM_ALLOC_ENABLE")), "0");
  EXPECT_FALSE(policy.huge_pages);
  EXPECT_EQ(policy.mmap_threshold, 1048576);
}

TEST(HostMemory, DefaultOptOutLeavesTheLibrariesAlone) {
  ScopedEnv opt_out("FURLONG_HOST_MEMORY", "default");
  ScopedEnv thp("THP_MEM_ALLOC_ENABLE", std::nullopt);
  ScopedEnv mmap("MALLOC_MMAP_THRESHOLD_", std::nullopt);
  auto policy = apply_host_memory_policy();
  EXPECT_EQ(std::getenv("THP_MEM_ALLOC_ENABLE"), nullptr);
  EXPECT_FALSE(policy.huge_pages);
  EXPECT_EQ(policy.mmap_threshold, 0);
  EXPECT_EQ(policy.describe(), "huge pages off, mmap threshold glibc default");
}

}  // namespace
}  // namespace furlong
