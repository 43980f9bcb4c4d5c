#include "core/dtype.h"

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

}  // namespace furlong
