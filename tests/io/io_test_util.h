// Helpers for the io tests: raw file construction, error capture, deterministic tensors.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "core/error.h"

namespace furlong::io::testing {

using furlong::testing::error_of;

#define EXPECT_HAS(message, part) \
  EXPECT_NE(std::string(message).find(part), std::string::npos) << "message: " << (message)

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::string le64(uint64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  return out;
}

// A safetensors file image: length prefix, header exactly as given (no padding), data.
inline std::string raw_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// The raw bytes of a tensor in C order, as lowercase hex.
inline std::string tensor_hex(const at::Tensor& tensor) {
  at::Tensor t = tensor.contiguous();
  const auto* bytes = static_cast<const unsigned char*>(t.const_data_ptr());
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

// True if both tensors have the same dtype, shape and bytes (NaNs compare by payload).
inline bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         tensor_hex(a) == tensor_hex(b);
}

// Deterministic values of any supported dtype, covering sign and (for floats) fractions.
inline at::Tensor make_tensor(c10::ScalarType dtype, at::IntArrayRef shape, int64_t seed) {
  at::Tensor base = at::arange(c10::multiply_integers(shape), at::kDouble).reshape(shape);
  base = (base * 37 + seed * 101).fmod(251) - 125;
  if (dtype == at::kBool) return base.gt(0);
  if (dtype == at::kByte) return (base + 125).to(dtype);
  if (at::isFloatingType(dtype)) return (base / 8).to(dtype);
  return base.to(dtype);
}

inline const std::vector<c10::ScalarType>& all_dtypes() {
  static const std::vector<c10::ScalarType> dtypes = {
      at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong,
      at::kInt,    at::kShort, at::kChar, at::kByte,     at::kBool};
  return dtypes;
}

}  // namespace furlong::io::testing
