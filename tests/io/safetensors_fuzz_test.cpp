// Seeded, time-bounded fuzzing of the safetensors reader. Valid files are mutated (bit flips,
// truncation, insertion, rewritten JSON numbers and dtypes, splices, lying length prefixes)
// and random JSON-ish headers are parsed. The contract: open() / parse_safetensors_header()
// either succeed with a result consistent with the bytes, or throw furlong::Error. Anything
// else (another exception type, a crash, a hang) fails the test; the failing input is saved.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <random>

#include "common/test_util.h"
#include "core/json_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace furlong::io {
namespace {

namespace fs = std::filesystem;
using testing::make_tensor;
using testing::raw_file;
using testing::read_bytes;
using testing::write_bytes;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSeed = 20240611;

class Budget {
 public:
  Budget(double seconds, int max_iterations) : seconds_(seconds), max_(max_iterations) {}
  bool next() {
    if (++done_ > max_) return false;
    return std::chrono::duration<double>(Clock::now() - start_).count() < seconds_;
  }
  int done() const { return done_; }

 private:
  Clock::time_point start_ = Clock::now();
  double seconds_;
  int max_;
  int done_ = 0;
};

uint64_t length_prefix(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

// Valid files of several shapes to start mutating from.
std::vector<std::string> seed_files(const fs::path& dir) {
  NamedTensors mixed;
  int64_t seed = 0;
  for (auto dtype : testing::all_dtypes()) {
    std::string name = dtype_to_safetensors(dtype);
    mixed.emplace_back("w." + name, make_tensor(dtype, {2, 3}, ++seed));
    mixed.emplace_back("s." + name, make_tensor(dtype, {}, ++seed));
  }
  mixed.emplace_back("empty", make_tensor(at::kFloat, {0, 3}, 1));
  save_safetensors(dir / "mixed.safetensors", mixed, {{"format", "pt"}, {"k", "v"}});
  save_safetensors(dir / "one.safetensors", {{"model.norm.weight", at::ones({4, 4})}});
  std::vector<std::string> seeds = {read_bytes(dir / "mixed.safetensors"),
                                    read_bytes(dir / "one.safetensors"), raw_file("{}      ", "")};
  // Unaligned (odd header length), as another writer might produce.
  seeds.push_back(raw_file(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                           R"("b":{"dtype":"I16","shape":[3],"data_offsets":[16,22]}} )",
                           std::string(22, '\x5a')));
  return seeds;
}

class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<std::string> seeds) : rng_(seed), seeds_(std::move(seeds)) {}

  std::string next() {
    std::string bytes = seeds_[pick(seeds_.size())];
    int rounds = 1 + static_cast<int>(pick(3));
    for (int r = 0; r < rounds; ++r) mutate(bytes);
    return bytes;
  }

 private:
  size_t pick(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  // A position biased towards the length prefix and header, where the interesting bugs live.
  size_t position(const std::string& bytes) {
    if (bytes.empty()) return 0;
    size_t header_end = std::min<uint64_t>(bytes.size(), 8 + length_prefix(bytes) + 16);
    return pick(3) ? pick(header_end) : pick(bytes.size());
  }

  void mutate(std::string& bytes) {
    switch (pick(8)) {
      case 0:  // flip bits
        for (size_t k = 0, n = 1 + pick(4); k < n && !bytes.empty(); ++k) {
          bytes[position(bytes)] ^= static_cast<char>(1u << pick(8));
        }
        break;
      case 1:  // truncate
        bytes.resize(pick(bytes.size() + 1));
        break;
      case 2:  // insert random bytes
        bytes.insert(position(bytes), random_bytes(1 + pick(8)));
        break;
      case 3:
        replace_number(bytes);
        break;
      case 4: {  // splice with another seed
        const std::string& other = seeds_[pick(seeds_.size())];
        bytes = bytes.substr(0, pick(bytes.size() + 1)) + other.substr(pick(other.size() + 1));
        break;
      }
      case 5:
        rewrite_length_prefix(bytes);
        break;
      case 6:
        replace_token(bytes);
        break;
      default:  // duplicate a slice in place
        if (!bytes.empty()) {
          size_t at = position(bytes);
          bytes.insert(at, bytes.substr(at, 1 + pick(24)));
        }
    }
  }

  std::string random_bytes(size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(pick(256)));
    return out;
  }

  // Replaces one run of digits in the header with a nearby, extreme or malformed number.
  void replace_number(std::string& bytes) {
    size_t header_end = std::min<uint64_t>(bytes.size(), 8 + length_prefix(bytes));
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t i = 8; i < header_end; ++i) {
      if (!isdigit(static_cast<unsigned char>(bytes[i]))) continue;
      size_t j = i;
      while (j < header_end && isdigit(static_cast<unsigned char>(bytes[j]))) ++j;
      runs.emplace_back(i, j - i);
      i = j;
    }
    if (runs.empty()) return;
    auto [start, length] = runs[pick(runs.size())];
    uint64_t old_value = std::stoull(bytes.substr(start, std::min<size_t>(length, 18)));
    static const std::vector<std::string> kSpecial = {"0",
                                                      "1",
                                                      "-1",
                                                      "1.5",
                                                      "1e3",
                                                      "9223372036854775807",
                                                      "18446744073709551615",
                                                      "18446744073709551616",
                                                      "4611686018427387904",
                                                      "99999999999999999999999"};
    std::string replacement;
    switch (pick(3)) {
      case 0:
        replacement = std::to_string(old_value + 1 - 2 * pick(2));
        break;
      case 1:
        replacement = kSpecial[pick(kSpecial.size())];
        break;
      default:
        replacement = std::to_string(rng_() >> pick(64));
    }
    bytes.replace(start, length, replacement);
  }

  void rewrite_length_prefix(std::string& bytes) {
    if (bytes.size() < 8) return;
    uint64_t n = length_prefix(bytes);
    const uint64_t choices[] = {n + 1,       n - 1,       bytes.size() - 8, bytes.size(),
                                100'000'000, 100'000'001, rng_(),           0};
    std::string prefix = testing::le64(choices[pick(std::size(choices))]);
    bytes.replace(0, 8, prefix);
  }

  // Swaps a dtype or structural token for another.
  void replace_token(std::string& bytes) {
    static const std::vector<std::string> kTokens = {"\"F32\"",
                                                     "\"BF16\"",
                                                     "\"I64\"",
                                                     "\"BOOL\"",
                                                     "\"F8_E4M3\"",
                                                     "\"U16\"",
                                                     "\"shape\"",
                                                     "\"dtype\"",
                                                     "\"data_offsets\"",
                                                     "\"__metadata__\"",
                                                     "[]",
                                                     "{}",
                                                     "null",
                                                     ",",
                                                     ":",
                                                     "\""};
    const std::string& from = kTokens[pick(kTokens.size())];
    size_t at = bytes.find(from, pick(bytes.size() / 2 + 1));
    if (at == std::string::npos) return;
    bytes.replace(at, from.size(), kTokens[pick(kTokens.size())]);
  }

  std::mt19937_64 rng_;
  std::vector<std::string> seeds_;
};

// After a successful open: the tensors tile the data buffer and their contents are the bytes.
void expect_consistent(const SafetensorsFile& file, const std::string& bytes) {
  const uint64_t data_start = 8 + length_prefix(bytes);
  const uint64_t data_size = bytes.size() - data_start;
  std::vector<TensorInfo> sorted = file.tensors();
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  uint64_t covered = 0;
  for (const auto& info : sorted) {
    ASSERT_EQ(info.begin, covered) << info.name;
    covered = info.end;
    at::Tensor t = file.tensor(info.name);
    ASSERT_EQ(t.sizes().vec(), info.shape);
    ASSERT_EQ(t.numel() * t.element_size(), static_cast<int64_t>(info.end - info.begin));
    ASSERT_EQ(testing::tensor_hex(t),
              testing::tensor_hex(
                  at::from_blob(const_cast<char*>(bytes.data()) + data_start + info.begin,
                                {static_cast<int64_t>(info.end - info.begin)}, at::kByte)));
  }
  ASSERT_EQ(covered, data_size);
}

TEST(SafetensorsFuzz, MutatedFilesOpenConsistentlyOrFailWithFurlongError) {
  auto dir = furlong::testing::scratch_dir();
  Mutator mutator(kSeed, seed_files(dir));
  const auto path = dir / "fuzz.safetensors";
  int accepted = 0, rejected = 0;
  Budget budget(/*seconds=*/4.0, /*max_iterations=*/40000);
  while (budget.next()) {
    const std::string bytes = mutator.next();
    write_bytes(path, bytes);
    try {
      auto file = SafetensorsFile::open(path);
      expect_consistent(*file, bytes);
      ++accepted;
    } catch (const Error& e) {
      ++rejected;
      ASSERT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      write_bytes(dir / "failing_input.safetensors", bytes);
      FAIL() << "non-furlong exception (input saved as failing_input.safetensors): " << e.what();
    }
    if (::testing::Test::HasFatalFailure()) {
      write_bytes(dir / "failing_input.safetensors", bytes);
      FAIL() << "inconsistent result; input saved as failing_input.safetensors";
    }
  }
  std::cout << "[fuzz] " << budget.done() - 1 << " mutated files: " << accepted << " accepted, "
            << rejected << " rejected\n";
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

// Random token soup: mostly invalid JSON or invalid headers.
std::string token_soup(std::mt19937_64& rng) {
  static const std::vector<std::string> kTokens = {"{",
                                                   "}",
                                                   "[",
                                                   "]",
                                                   ",",
                                                   ":",
                                                   "\"dtype\"",
                                                   "\"shape\"",
                                                   "\"data_offsets\"",
                                                   "\"__metadata__\"",
                                                   "\"F32\"",
                                                   "\"BF16\"",
                                                   "\"BOOL\"",
                                                   "\"a\"",
                                                   "\"b\"",
                                                   "0",
                                                   "1",
                                                   "4",
                                                   "-1",
                                                   "1.5",
                                                   "1e30",
                                                   "18446744073709551615",
                                                   "18446744073709551616",
                                                   "true",
                                                   "null",
                                                   " ",
                                                   "\"\\u00e9\"",
                                                   "\"\\ud800\"",
                                                   "\"\xc3\xa9\"",
                                                   "\xff",
                                                   "\"\\\"",
                                                   "\n"};
  std::string out = rng() % 4 ? "{" : "";
  for (size_t i = 0, n = rng() % 40; i < n; ++i) out += kTokens[rng() % kTokens.size()];
  return out;
}

// A structured header: valid dtypes and tiled offsets, then perturbed now and then, so that
// both the accepting and the rejecting paths are exercised.
std::pair<std::string, uint64_t> random_header(std::mt19937_64& rng) {
  static const std::vector<std::pair<std::string, int>> kDtypes = {
      {"F32", 4}, {"BF16", 2}, {"I64", 8}, {"BOOL", 1}, {"U8", 1}, {"F8_E4M3", 1}};
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0, n = rng() % 5; i < n; ++i) {
    auto [dtype, size] = kDtypes[rng() % (rng() % 8 ? 5 : kDtypes.size())];
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (size_t d = 0, dims = rng() % 4; d < dims; ++d) {
      shape.push_back(static_cast<int64_t>(rng() % 4));
      numel *= shape.back();
    }
    uint64_t begin = offset, end = offset + numel * size;
    if (rng() % 8 == 0) end += rng() % 3 - 1;
    if (rng() % 8 == 0) begin = rng() % 64;
    offset = end;
    header += std::string(i ? "," : "") + "\"t" + std::to_string(rng() % 6) + "\":{\"dtype\":\"" +
              dtype + "\",\"shape\":" + Json(shape).dump() + ",\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(end) + "]}";
  }
  if (rng() % 4 == 0)
    header += std::string(header.size() > 1 ? "," : "") + R"("__metadata__":{"k":"v"})";
  header += "}";
  uint64_t data_size = rng() % 8 ? offset : offset + rng() % 3 - 1;
  return {header, data_size};
}

TEST(SafetensorsFuzz, RandomHeadersParseConsistentlyOrFailWithFurlongError) {
  std::mt19937_64 rng(kSeed + 1);
  int accepted = 0, rejected = 0;
  Budget budget(/*seconds=*/2.5, /*max_iterations=*/60000);
  while (budget.next()) {
    auto [header, data_size] =
        rng() % 2 ? random_header(rng) : std::pair{token_soup(rng), rng() % 64};
    std::map<std::string, std::string> metadata;
    try {
      auto tensors = parse_safetensors_header(header, data_size, "fuzz.safetensors", &metadata);
      uint64_t covered = 0;
      for (const auto& t : tensors) {
        ASSERT_EQ(t.begin, covered) << header;
        covered = t.end;
      }
      ASSERT_EQ(covered, data_size) << header;
      ++accepted;
    } catch (const Error& e) {
      ASSERT_EQ(std::string(e.what()).rfind("fuzz.safetensors", 0), 0u) << e.what();
      ++rejected;
    } catch (const std::exception& e) {
      FAIL() << "non-furlong exception for header " << header << ": " << e.what();
    }
  }
  std::cout << "[fuzz] " << budget.done() - 1 << " headers: " << accepted << " accepted, "
            << rejected << " rejected\n";
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace furlong::io
