#include "core/dtype.h"

#include <cstdlib>
#include <fstream>
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

bool cpuinfo_lists_bf16() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    std::string flag;
    while (words >> flag) {
      if (flag == "avx512_bf16" || flag == "amx_bf16") return true;
    }
    return false;  // every core lists the same flags
  }
  return false;
}

}  // namespace

bool has_native_bf16(const c10::Device& device) {
  if (device.is_cuda()) return true;
  static const bool listed = cpuinfo_lists_bf16();
  return device.is_cpu() && listed && !aten_capped_below_avx512();
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

}  // namespace furlong
