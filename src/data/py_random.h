// CPython's `random` module generator (MT19937 seeded by init_by_array), enough of it to
// reproduce `random.seed(s); random.shuffle(x)` bit for bit. miles shuffles its prompt dataset
// each epoch with exactly that call (seed = rollout_seed + epoch), so using the same generator
// makes a furlong run visit prompts in the same order as a miles run with the same seed, on
// every platform (the algorithm is fully specified; no std:: distribution is involved).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace furlong::data {

class PyRandom {
 public:
  // random.seed(seed) for a non-negative integer seed (CPython hashes |seed| into 32-bit words).
  explicit PyRandom(uint64_t seed);
  // One 32-bit output of MT19937 (CPython's genrand_uint32).
  uint32_t next_u32();
  // random.getrandbits(k) for 1 <= k <= 32.
  uint32_t getrandbits(int k);
  // random._randbelow(n) (rejection sampling on n.bit_length() bits), 1 <= n < 2^32.
  uint64_t randbelow(uint64_t n);
  // random.shuffle(values) in place.
  template <typename T>
  void shuffle(std::vector<T>& values) {
    for (size_t i = values.size(); i-- > 1;) {
      size_t j = static_cast<size_t>(randbelow(i + 1));
      std::swap(values[i], values[j]);
    }
  }

 private:
  static constexpr int kN = 624;
  void init_genrand(uint32_t s);
  void init_by_array(const std::vector<uint32_t>& key);
  void twist();
  std::array<uint32_t, kN> mt_{};
  int mti_ = kN + 1;
};

// The order of epoch `epoch` of an n-row dataset, as miles computes it: random.seed(seed + epoch)
// and random.shuffle(list(range(n))). Entry i is the original row shown at position i.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace furlong::data
