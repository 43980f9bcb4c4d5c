// The BPE model of a tokenizer.json: vocab, merges ranked by position, and the merge loop
// (repeatedly merge the adjacent pair of lowest rank, leftmost first), with a thread-safe
// per-piece cache. Pieces arrive already in the model's alphabet (for byte-level files, the
// ByteLevel pre-tokenizer's characters).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace furlong::tokenizer {

// Transparent hash so maps keyed by std::string can be probed with a std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // `model` is tokenizer.json's "model" object; `where` names the file in errors.
  Bpe(const nlohmann::json& model, const std::string& where);
  ~Bpe();

  // Appends the ids of one pre-tokenized piece to `out`.
  void tokenize(std::string_view piece, std::vector<int64_t>& out) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  // nullptr if no token has this id.
  const std::string* id_to_token(int64_t id) const;
  // Max id + 1 (0 for an empty vocab).
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  class PairTable;
  struct CacheShard {
    std::shared_mutex mutex;
    StringMap<std::vector<int32_t>> entries;
  };
  static constexpr size_t kCacheShards = 64;

  void load_vocab(const nlohmann::json& vocab, const std::string& where);
  void load_merges(const nlohmann::json& merges, const std::string& where);
  void load_options(const nlohmann::json& model, const std::string& where);
  // The initial symbols of a piece: one per character (byte fallback / unk as configured).
  void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;
  bool cache_lookup(std::string_view piece, size_t hash, std::vector<int64_t>& out) const;
  void cache_store(std::string_view piece, size_t hash, const std::vector<int32_t>& ids) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> tokens_;  // by id
  std::vector<bool> has_token_;      // by id: whether tokens_[id] is a real token
  std::unique_ptr<PairTable> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_fallback_ids_{};  // <0xXX> tokens, -1 where absent
  mutable std::array<CacheShard, kCacheShards> cache_;
};

// Bytes the calling thread's BPE buffers keep between calls: bounded (a few hundred KiB)
// whatever was encoded before.
size_t bpe_thread_scratch_bytes();

}  // namespace furlong::tokenizer
