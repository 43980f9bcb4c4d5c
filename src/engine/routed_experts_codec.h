// SGLang's wire form of routed experts (return_routed_experts on /generate): base64 of the raw
// little-endian int32 buffer [prompt + output - 1, L, K] in meta_info.routed_experts. SGLang
// leaves out the last token's row (it never ran through the model); furlong's RoutedExperts
// (core/routed_experts.h) keeps it, filled with -1. Shared by the server (encode), the remote
// engine client and the colocated engines' messages (decode).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/routed_experts.h"

namespace furlong::engine {

// Standard base64 (RFC 4648, '+' '/', '=' padding) of raw bytes, and back. decode raises
// furlong::Error naming `where` on a character outside the alphabet or a bad length.
std::string base64_encode(const void* data, size_t bytes);
std::vector<uint8_t> base64_decode(std::string_view text, const std::string& where);

// SGLang's field: the first num_tokens() - 1 rows of `r` (all of them when r has one row or
// none: then the string is empty).
std::string routed_experts_to_sglang(const RoutedExperts& r);
// The inverse for a sequence of `tokens` tokens: expects (tokens - 1) * L * K ids and appends the
// last row of -1. Raises furlong::Error naming `where` when the size does not match.
RoutedExperts routed_experts_from_sglang(std::string_view base64, int64_t tokens,
                                         int64_t num_layers, int64_t top_k,
                                         const std::string& where);

}  // namespace furlong::engine
