// dtype names as users and HF files spell them.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <string_view>

namespace furlong {

// Accepts float32/fp32/float, bfloat16/bf16, float16/fp16/half (HF config "torch_dtype" too).
// `where` names the flag or field for the error message.
c10::ScalarType parse_dtype(std::string_view name, const std::string& where);
// The HF config.json spelling: "float32", "bfloat16", "float16".
std::string dtype_name(c10::ScalarType dtype);

}  // namespace furlong
