#include "core/dtype.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "core/error.h"

namespace furlong {

c10::ScalarType parse_dtype(std::string_view name, const std::string& where) {
  if (name == "float32" || name == "fp32" || name == "float") return c10::kFloat;
  if (name == "bfloat16" || name == "bf16") return c10::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return c10::kHalf;
  FURLONG_FAIL(where, ": unknown dtype '", name, "'; expected float32, bfloat16 or float16");
}

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return "float32";
    case c10::kBFloat16:
      return "bfloat16";
    case c10::kHalf:
      return "float16";
    case c10::kDouble:
      return "float64";
    default:
      return std::string(c10::toString(dtype));
  }
}

namespace {

// ATEN_CPU_CAPABILITY below AVX-512 stands for a CPU without native bf16 (read on every call,
// so a test can set it).
bool aten_capped_below_avx512() {
  const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
  if (cap == nullptr) return false;
  const std::string value(cap);
  return value == "avx2" || value == "default" || value == "zvector" || value == "sve256";
}

// Whether the first "flags" line of /proc/cpuinfo lists any of `wanted` (every core lists the
// same flags).
bool cpuinfo_lists_any(std::initializer_list<std::string_view> wanted) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    std::string flag;
    while (words >> flag) {
      for (auto w : wanted) {
        if (flag == w) return true;
      }
    }
    return false;
  }
  return false;
}

bool cpuinfo_lists_bf16() {
  return cpuinfo_lists_any({"avx512_bf16", "amx_bf16"});
}

// ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA (read on every call): unset, ALL, DEFAULT or an AMX
// level leave oneDNN free to use AMX; any other value (AVX2, AVX512_CORE_BF16, ...) caps below.
bool onednn_allows_amx() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* raw = std::getenv(name);
    if (raw == nullptr || *raw == '\0') continue;
    std::string value(raw);
    for (auto& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return value == "all" || value == "default" || value.find("amx") != std::string::npos;
  }
  return true;
}

}  // namespace

bool has_native_bf16(const c10::Device& device) {
  if (device.is_cuda()) return true;
  static const bool listed = cpuinfo_lists_bf16();
  return device.is_cpu() && listed && !aten_capped_below_avx512();
}

bool cpu_has_amx_bf16() {
  static const bool listed = cpuinfo_lists_any({"amx_bf16"});
  return listed && !aten_capped_below_avx512() && onednn_allows_amx();
}

c10::ScalarType resolve_auto_dtype(c10::ScalarType preferred, const c10::Device& device,
                                   std::string* reason) {
  const bool native = preferred == c10::kFloat ||
                      (preferred == c10::kBFloat16 && has_native_bf16(device)) ||
                      (preferred == c10::kHalf && device.is_cuda());
  if (reason) {
    *reason = native
                  ? dtype_name(preferred) + " (auto: " + device.str() + " computes it natively)"
                  : "float32 (auto: " + device.str() + " has no native " + dtype_name(preferred) +
                        " arithmetic (AVX512-BF16 or AMX), so bf16 weights are widened to fp32; "
                        "pass the dtype explicitly to force it)";
  }
  return native ? preferred : c10::kFloat;
}

c10::ScalarType parse_compute_dtype(std::string_view name, c10::ScalarType preferred,
                                    const c10::Device& device, const std::string& where,
                                    std::string* reason) {
  if (name == "auto") return resolve_auto_dtype(preferred, device, reason);
  auto dtype = parse_dtype(name, where);
  if (reason) *reason = dtype_name(dtype) + " (" + where + ")";
  return dtype;
}

const std::vector<std::string>& compute_dtype_choices() {
  static const std::vector<std::string> choices = {"auto", "bfloat16", "float16", "float32"};
  return choices;
}

ComputeDtype parse_compute_dtype_choice(const std::string& name) {
  const auto& choices = compute_dtype_choices();
  auto it = std::find(choices.begin(), choices.end(), name);
  FURLONG_CHECK(it != choices.end(), "--compute-dtype: invalid choice '", name,
                "' (choose from auto, bfloat16, float16, float32)");
  return static_cast<ComputeDtype>(it - choices.begin());
}

const std::string& compute_dtype_name(ComputeDtype dtype) {
  return compute_dtype_choices().at(static_cast<size_t>(dtype));
}

c10::ScalarType resolve_compute_dtype(ComputeDtype dtype, c10::ScalarType preferred,
                                      const c10::Device& device, std::string* reason) {
  return parse_compute_dtype(compute_dtype_name(dtype), preferred, device, "--compute-dtype",
                             reason);
}

std::string trainer_dtype_name(bool fp16, ComputeDtype compute_dtype,
                               const std::string& device_type) {
  if (fp16) return "float16";
  const c10::Device device(device_type.empty() ? (at::hasCUDA() ? "cuda" : "cpu") : device_type);
  return dtype_name(resolve_compute_dtype(compute_dtype, c10::kBFloat16, device));
}

std::string rl_engine_dtype_name(bool fp16, ComputeDtype compute_dtype,
                                 const std::string& device_type) {
  const auto name = trainer_dtype_name(fp16, compute_dtype, device_type);
  return name == "float16" ? "auto" : name;
}

}  // namespace furlong
