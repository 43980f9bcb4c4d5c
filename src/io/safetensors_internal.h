// Helpers shared by the safetensors reader, writer and HF directory code; not a public API.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace furlong::io::detail {

// The safetensors spelling of a supported dtype, or nullopt.
std::optional<std::string_view> safetensors_dtype_name(c10::ScalarType dtype);
// The order key of the reference writer: tensors are laid out by descending rank, then name.
// The rank follows the reference's dtype enumeration, so it grows with alignment.
int dtype_layout_rank(c10::ScalarType dtype);
// "BOOL, U8, ..." for error messages.
std::string supported_dtype_list();
// "[4, 4]" for error messages.
std::string shape_string(const std::vector<int64_t>& shape);
// Byte offset of the first invalid UTF-8 sequence, or nullopt if `text` is valid UTF-8.
std::optional<size_t> find_invalid_utf8(std::string_view text);

}  // namespace furlong::io::detail
