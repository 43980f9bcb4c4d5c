// --dtype auto (core/dtype.h): the engine computes a bf16 checkpoint in fp32 where the CPU has
// no native bf16, holds the checkpoint's values exactly, and reports the digest of what the
// trainer sends (the checkpoint's dtype), so --check-weight-update-equal still holds.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "common/test_util.h"
#include "core/digest.h"
#include "core/dtype.h"
#include "engine_test_util.h"
#include "models/hf_model.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for the test's scope (the rules read them on every call).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
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

// ATEN_CPU_CAPABILITY for the test's scope.
class ScopedCapability : public ScopedEnv {
 public:
  explicit ScopedCapability(const char* value) : ScopedEnv("ATEN_CPU_CAPABILITY", value) {}
};

TEST(AutoDtype, AutoKeepsFloat32AndWidensBf16WithoutNativeSupport) {
  const c10::Device cpu(c10::kCPU);
  EXPECT_EQ(resolve_auto_dtype(c10::kFloat, cpu), c10::kFloat);
  EXPECT_EQ(resolve_auto_dtype(c10::kHalf, cpu), c10::kFloat);
  {
    ScopedCapability avx2("avx2");
    EXPECT_FALSE(has_native_bf16(cpu));
    std::string reason;
    EXPECT_EQ(resolve_auto_dtype(c10::kBFloat16, cpu, &reason), c10::kFloat);
    EXPECT_NE(reason.find("no native bfloat16"), std::string::npos) << reason;
  }
  EXPECT_EQ(resolve_auto_dtype(c10::kBFloat16, cpu),
            has_native_bf16(cpu) ? c10::kBFloat16 : c10::kFloat);
  EXPECT_EQ(parse_compute_dtype("bf16", c10::kFloat, cpu, "--dtype"), c10::kBFloat16);
  EXPECT_THROW(parse_compute_dtype("bf17", c10::kFloat, cpu, "--dtype"), Error);
}

// cpu_has_amx_bf16: what /proc/cpuinfo lists, unless ATen is capped below AVX-512 or oneDNN's
// ISA cap (ONEDNN_MAX_CPU_ISA, any case) stops short of AMX.
TEST(AutoDtype, AmxBf16FollowsCpuinfoAndTheIsaCaps) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  bool listed = false;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      listed = (line + " ").find(" amx_bf16 ") != std::string::npos;
      break;
    }
  }
  ScopedEnv no_cap("ONEDNN_MAX_CPU_ISA", "ALL");
  const bool aten_capped =
      std::getenv("ATEN_CPU_CAPABILITY") != nullptr && !has_native_bf16(c10::Device(c10::kCPU));
  EXPECT_EQ(cpu_has_amx_bf16(), listed && !aten_capped);
  {
    ScopedEnv cap("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16");
    EXPECT_FALSE(cpu_has_amx_bf16());
  }
  {
    ScopedEnv cap("ONEDNN_MAX_CPU_ISA", "avx2");
    EXPECT_FALSE(cpu_has_amx_bf16());
  }
  {
    ScopedEnv cap("ONEDNN_MAX_CPU_ISA", "avx512_core_amx");
    EXPECT_EQ(cpu_has_amx_bf16(), listed && !aten_capped);
  }
  {
    ScopedCapability avx2("avx2");
    EXPECT_FALSE(cpu_has_amx_bf16());
  }
}

TEST(AutoDtype, EngineAutoOnAnAvx2CpuHoldsTheBf16ValuesInFloat32) {
  ScopedCapability avx2("avx2");
  const fs::path model_dir = furlong::testing::scratch_dir() / "bf16_model";
  testing::write_tiny_model(model_dir, testing::tiny_config("qwen3"), 7, "bfloat16");
  auto options = testing::small_engine_options("auto");
  auto eng = Engine::load(model_dir.string(), options);
  EXPECT_EQ(eng->model_info()["dtype"], "float32");

  models::LoadOptions as_is;  // the checkpoint's own bf16 tensors
  auto reference = models::load_hf_model(model_dir, as_is);
  for (const auto& [name, t] : reference->named_weights()) {
    const auto& held =
        eng->model().weights()[eng->model().locate(name).first][eng->model().locate(name).second];
    ASSERT_EQ(held.scalar_type(), c10::kFloat) << name;
    EXPECT_TRUE(at::equal(held, t.to(at::kFloat))) << name;
  }
  EXPECT_EQ(eng->weights_digest(), tensors_digest(reference->named_weights()));

  auto out = eng->generate(testing::greedy_requests({{1, 2, 3, 4}}, 4));
  EXPECT_EQ(out.at(0).output_ids.size(), 4u);
}

}  // namespace
}  // namespace furlong::engine
