#include "data/py_random.h"

#include <numeric>

#include "core/error.h"

namespace furlong::data {

PyRandom::PyRandom(uint64_t seed) {
  // CPython splits |seed| into 32-bit words, least significant first; 0 becomes [0].
  std::vector<uint32_t> key;
  do {
    key.push_back(static_cast<uint32_t>(seed & 0xffffffffu));
    seed >>= 32;
  } while (seed != 0);
  init_by_array(key);
}

void PyRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < kN; ++i) {
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
  mti_ = kN;
}

void PyRandom::init_by_array(const std::vector<uint32_t>& key) {
  init_genrand(19650218u);
  int i = 1;
  size_t j = 0;
  const int key_length = static_cast<int>(key.size());
  for (int k = std::max(kN, key_length); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] +
             static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] =
        (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;
}

void PyRandom::twist() {
  constexpr int kM = 397;
  constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
  for (int k = 0; k < kN; ++k) {
    uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
    mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  mti_ = 0;
}

uint32_t PyRandom::next_u32() {
  if (mti_ >= kN) twist();
  uint32_t y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint32_t PyRandom::getrandbits(int k) {
  FURLONG_ASSERT(k >= 1 && k <= 32, "getrandbits supports 1..32 bits, got ", k);
  return next_u32() >> (32 - k);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  FURLONG_ASSERT(n >= 1 && n < (uint64_t{1} << 32), "randbelow supports 1 <= n < 2^32, got ", n);
  int k = 0;
  for (uint64_t v = n; v != 0; v >>= 1) ++k;  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  FURLONG_CHECK(n >= 0 && n < (int64_t{1} << 32), "dataset of ", n,
                " rows: shuffling supports fewer than 2^32 rows");
  FURLONG_CHECK(epoch >= 0, "epoch must be >= 0, got ", epoch);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  PyRandom rng(seed + static_cast<uint64_t>(epoch));
  rng.shuffle(order);
  return order;
}

}  // namespace furlong::data
