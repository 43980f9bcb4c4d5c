#include "engine/routed_experts_codec.h"

#include <array>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace furlong::engine {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// 0..63 for alphabet characters, -1 otherwise.
constexpr std::array<int8_t, 256> decode_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}

static_assert(std::endian::native == std::endian::little,
              "the routed-experts wire form is little-endian int32 (as SGLang's numpy buffer)");

}  // namespace

std::string base64_encode(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((bytes + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (const size_t rest = bytes - i; rest > 0) {
    uint32_t v = uint32_t{p[i]} << 16;
    if (rest == 2) v |= uint32_t{p[i + 1]} << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::vector<uint8_t> base64_decode(std::string_view text, const std::string& where) {
  static constexpr auto kTable = decode_table();
  FURLONG_CHECK(text.size() % 4 == 0, where, ": base64 text of ", text.size(),
                " characters (not a multiple of 4)");
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      const auto c = static_cast<uint8_t>(text[i + j]);
      const int d = j >= 4 - static_cast<size_t>(pad) ? 0 : kTable[c];
      FURLONG_CHECK(d >= 0, where, ": character ", static_cast<int>(c), " at ", i + j,
                    " is not base64");
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out.push_back(static_cast<uint8_t>(v >> 16));
    if (pad < 2) out.push_back(static_cast<uint8_t>(v >> 8));
    if (pad < 1) out.push_back(static_cast<uint8_t>(v));
  }
  return out;
}

std::string routed_experts_to_sglang(const RoutedExperts& r) {
  const int64_t rows = r.num_tokens();
  if (rows <= 1) return "";
  const size_t ids = static_cast<size_t>((rows - 1) * r.num_layers * r.top_k);
  return base64_encode(r.ids.data(), ids * sizeof(int32_t));
}

RoutedExperts routed_experts_from_sglang(std::string_view base64, int64_t tokens,
                                         int64_t num_layers, int64_t top_k,
                                         const std::string& where) {
  FURLONG_CHECK(tokens >= 1 && num_layers >= 1 && top_k >= 1, where,
                ": routed experts need tokens, layers and top-k >= 1, got ", tokens, ", ",
                num_layers, ", ", top_k);
  const auto bytes = base64_decode(base64, where);
  const int64_t want = (tokens - 1) * num_layers * top_k;
  FURLONG_CHECK(static_cast<int64_t>(bytes.size()) == want * 4, where, ": routed_experts holds ",
                bytes.size(), " bytes, expected int32 [", tokens - 1, " tokens, ", num_layers,
                " layers, ", top_k, " experts] = ", want * 4, " bytes");
  RoutedExperts r;
  r.num_layers = num_layers;
  r.top_k = top_k;
  r.ids.assign(static_cast<size_t>(tokens * num_layers * top_k), -1);
  if (want > 0) std::memcpy(r.ids.data(), bytes.data(), bytes.size());
  return r;
}

}  // namespace furlong::engine
