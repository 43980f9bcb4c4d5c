#include "core/digest.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace furlong {
namespace {

constexpr uint64_t kMulA = 0x9E3779B185EBCA87ull;
constexpr uint64_t kMulB = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kMulC = 0x165667B19E3779F9ull;

inline uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

inline uint64_t mix_word(uint64_t lane, uint64_t word) {
  lane += word * kMulB;
  lane = rotl(lane, 31);
  return lane * kMulA;
}

inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kMulB;
  h ^= h >> 29;
  h *= kMulC;
  h ^= h >> 32;
  return h;
}

}  // namespace

Digest64::Digest64(uint64_t seed) {
  lanes_[0] = seed + kMulA + kMulB;
  lanes_[1] = seed + kMulB;
  lanes_[2] = seed;
  lanes_[3] = seed - kMulA;
}

void Digest64::update(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  size_t i = 0;
  // Bulk: 32 bytes per round, one word per lane (the lanes are independent, so the compiler
  // keeps four multiply chains in flight).
  for (; i + 32 <= size; i += 32) {
    uint64_t w[4];
    std::memcpy(w, bytes + i, 32);
    for (int l = 0; l < 4; ++l) lanes_[l] = mix_word(lanes_[l], w[l]);
  }
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    lanes_[0] = mix_word(lanes_[0], w);
    std::rotate(lanes_, lanes_ + 1, lanes_ + 4);
  }
  if (i < size) {
    uint64_t w = 0;
    std::memcpy(&w, bytes + i, size - i);
    lanes_[1] = mix_word(lanes_[1], w ^ (size - i));
  }
  // The length of every update is part of the hash (field boundaries matter).
  lanes_[2] = mix_word(lanes_[2], static_cast<uint64_t>(size));
  total_ += size;
}

void Digest64::update(std::string_view text) {
  update(text.data(), text.size());
}

void Digest64::update_u64(uint64_t value) {
  update(&value, sizeof(value));
}

uint64_t Digest64::value() const {
  uint64_t h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
  h ^= total_ * kMulC;
  return avalanche(h);
}

std::string Digest64::hex() const {
  static const char* digits = "0123456789abcdef";
  uint64_t v = value();
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = digits[v & 15];
  return out;
}

uint64_t tensor_digest(const std::string& name, const at::Tensor& tensor) {
  FURLONG_CHECK(tensor.defined(), "digest: tensor '", name, "' is undefined");
  Digest64 d;
  d.update(name);
  d.update(std::string_view(c10::toString(tensor.scalar_type())));
  d.update_u64(static_cast<uint64_t>(tensor.dim()));
  for (int64_t s : tensor.sizes()) d.update_u64(static_cast<uint64_t>(s));
  auto cpu = tensor.detach().to(at::kCPU).contiguous();
  d.update(cpu.data_ptr(), cpu.nbytes());
  return d.value();
}

std::string combine_tensor_digests(std::vector<std::pair<std::string, uint64_t>> per_tensor) {
  std::sort(per_tensor.begin(), per_tensor.end());
  Digest64 all;
  for (size_t k = 0; k < per_tensor.size(); ++k) {
    FURLONG_CHECK(k == 0 || per_tensor[k - 1].first != per_tensor[k].first, "digest: tensor name '",
                  per_tensor[k].first, "' appears twice");
    all.update_u64(per_tensor[k].second);
  }
  all.update_u64(static_cast<uint64_t>(per_tensor.size()));
  return all.hex();
}

std::string tensors_digest(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  std::vector<std::pair<std::string, uint64_t>> per_tensor;
  per_tensor.reserve(named.size());
  for (const auto& [name, tensor] : named)
    per_tensor.emplace_back(name, tensor_digest(name, tensor));
  return combine_tensor_digests(std::move(per_tensor));
}

}  // namespace furlong
