#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <mutex>

#include "core/json_util.h"
#include "tokenizer/unicode.h"

namespace furlong::tokenizer {
namespace {

constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;
// Pieces longer than this are not cached (they are rare, and would make the cache large).
constexpr size_t kMaxCachedPieceBytes = 256;
// A shard is cleared when it reaches this many entries (64 shards: ~260k pieces in total).
constexpr size_t kMaxCacheEntriesPerShard = 4096;
// Per-thread merge buffers larger than this (in symbols) are released after use.
constexpr size_t kMaxRetainedScratch = 1 << 16;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The calling thread's buffers, reused across calls and released after a piece larger than
// kMaxRetainedScratch: a server keeps one per handler thread (256 by default), so a 10 MB
// prompt must not leave ~40 MB behind in each.
std::vector<int32_t>& thread_piece_ids() {
  thread_local std::vector<int32_t> ids;
  return ids;
}
size_t& thread_merge_bytes() {
  thread_local size_t bytes = 0;
  return bytes;
}

// UTF-8 length of the character whose lead byte is `b` (text is valid UTF-8).
size_t char_length(unsigned char b) {
  return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
}

}  // namespace

// Open-addressing hash table from a (left id, right id) pair to its merge: the rank (index in
// `merges`) and the id of the merged token.
class Bpe::PairTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };

  explicit PairTable(size_t count) {
    size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    keys_.assign(capacity, kEmpty);
    values_.resize(capacity);
  }
  // A pair listed twice keeps its last rank, as HF's HashMap construction does.
  void insert(uint64_t key, Merge merge) {
    size_t slot = find_slot(key);
    keys_[slot] = key;
    values_[slot] = merge;
  }
  const Merge* find(uint64_t key) const {
    size_t slot = find_slot(key);
    return keys_[slot] == key ? &values_[slot] : nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^31, so never a real key
  size_t find_slot(uint64_t key) const {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    const size_t mask = keys_.size() - 1;
    size_t slot = h & mask;
    while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask;
    return slot;
  }
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
};

Bpe::Bpe(const Json& model, const std::string& where) {
  const std::string model_where = where + ": model";
  auto vocab = model.find("vocab");
  FURLONG_CHECK(vocab != model.end() && vocab->is_object(), model_where,
                ": field 'vocab' must be an object mapping tokens to ids");
  load_vocab(*vocab, model_where + ".vocab");
  auto merges = model.find("merges");
  const Json no_merges = Json::array();
  FURLONG_CHECK(merges == model.end() || merges->is_array(), model_where,
                ": field 'merges' must be an array");
  load_merges(merges == model.end() ? no_merges : *merges, model_where + ".merges");
  load_options(model, model_where);
}

Bpe::~Bpe() = default;

void Bpe::load_vocab(const Json& vocab, const std::string& where) {
  vocab_.reserve(vocab.size());
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    FURLONG_CHECK(
        it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= kMaxId, where,
        ": token '", it.key(), "' has id ", json_excerpt(*it),
        "; ids must be integers in [0, 2^31)");
    const int64_t id = it->get<int64_t>();
    vocab_.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  const int64_t count = static_cast<int64_t>(vocab_.size());
  FURLONG_CHECK(max_id < 2 * count + 1024, where, ": token id ", max_id,
                " is far beyond the vocabulary size (", count, " tokens); ids must be dense");
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  has_token_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : vocab_) {
    tokens_[id] = token;
    has_token_[id] = true;
  }
}

void Bpe::load_merges(const Json& merges, const std::string& where) {
  merges_ = std::make_unique<PairTable>(merges.size());
  auto id_of = [&](const std::string& token, size_t index, const std::string& what) {
    auto it = vocab_.find(token);
    FURLONG_CHECK(it != vocab_.end(), where, "[", index, "]: merge refers to ", what, " '", token,
                  "', which is not in the vocab");
    return it->second;
  };
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {
      const auto& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      FURLONG_CHECK(
          space != std::string::npos && s.find(' ', space + 1) == std::string::npos, where, "[", i,
          "]: a merge string must be two tokens separated by one space, got ", json_excerpt(m));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {
      FURLONG_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where,
                    "[", i, "]: a merge must be \"a b\" or [\"a\", \"b\"], got ", json_excerpt(m));
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    const int32_t left_id = id_of(left, i, "token");
    const int32_t right_id = id_of(right, i, "token");
    const int32_t merged_id = id_of(left + right, i, "the merged token");
    merges_->insert(pair_key(left_id, right_id), {static_cast<int32_t>(i), merged_id});
  }
}

void Bpe::load_options(const Json& model, const std::string& where) {
  const auto prefix = json_get_or<std::string>(model, "continuing_subword_prefix", "", where);
  const auto suffix = json_get_or<std::string>(model, "end_of_word_suffix", "", where);
  FURLONG_CHECK(prefix.empty() && suffix.empty(), where,
                ": continuing_subword_prefix / end_of_word_suffix are not supported");
  const double dropout = json_get_or<double>(model, "dropout", 0.0, where);
  FURLONG_CHECK(dropout == 0.0, where, ": BPE dropout (", dropout,
                ") is not supported; inference tokenization must be deterministic");
  ignore_merges_ = json_get_or<bool>(model, "ignore_merges", false, where);
  fuse_unk_ = json_get_or<bool>(model, "fuse_unk", false, where);
  byte_fallback_ = json_get_or<bool>(model, "byte_fallback", false, where);
  if (auto unk = json_get_optional<std::string>(model, "unk_token", where)) {
    auto it = vocab_.find(*unk);
    FURLONG_CHECK(it != vocab_.end(), where, ": unk_token '", *unk, "' is not in the vocab");
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_fallback_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

// As HF: an unknown character becomes a pending unk token (fused with the next unknown one if
// fuse_unk), written out only before the next character found in the vocab or at the end; byte
// fallback tokens are written at once, so they can precede a pending unk.
void Bpe::initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  bool unk_pending = false;
  for (size_t pos = 0; pos < piece.size();) {
    const size_t len =
        std::min(char_length(static_cast<unsigned char>(piece[pos])), piece.size() - pos);
    const std::string_view ch = piece.substr(pos, len);
    pos += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (unk_pending) ids.push_back(*unk_id_);
      unk_pending = false;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) {
          return byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
        })) {
      for (char c : ch) ids.push_back(byte_fallback_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (!unk_id_) continue;  // no unk token: HF drops the character
    if (unk_pending && !fuse_unk_) ids.push_back(*unk_id_);
    unk_pending = true;
  }
  if (unk_pending) ids.push_back(*unk_id_);
}

void Bpe::merge(std::vector<int32_t>& ids) const {
  if (ids.size() < 2) return;
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, merged;
    // Min-heap order: lowest rank first, then leftmost.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  const auto n = static_cast<int32_t>(ids.size());
  symbols.resize(n);
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  heap.clear();
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const auto* m = merges_->find(pair_key(symbols[pos].id, symbols[next].id))) {
      heap.push_back({m->rank, pos, m->merged});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Stale if either side changed since the push: any change makes the merged token differ.
    const auto* m = merges_->find(pair_key(left.id, right.id));
    if (m == nullptr || m->merged != c.merged) continue;
    left.id = c.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  if (symbols.capacity() > kMaxRetainedScratch) {  // do not keep a huge piece's buffers
    std::vector<Symbol>().swap(symbols);
    std::vector<Candidate>().swap(heap);
  }
  thread_merge_bytes() = symbols.capacity() * sizeof(Symbol) + heap.capacity() * sizeof(Candidate);
}

size_t bpe_thread_scratch_bytes() {
  return thread_piece_ids().capacity() * sizeof(int32_t) + thread_merge_bytes();
}

bool Bpe::cache_lookup(std::string_view piece, size_t hash, std::vector<int64_t>& out) const {
  CacheShard& shard = cache_[hash % kCacheShards];
  std::shared_lock lock(shard.mutex);
  auto it = shard.entries.find(piece);
  if (it == shard.entries.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void Bpe::cache_store(std::string_view piece, size_t hash, const std::vector<int32_t>& ids) const {
  CacheShard& shard = cache_[hash % kCacheShards];
  std::unique_lock lock(shard.mutex);
  if (shard.entries.size() >= kMaxCacheEntriesPerShard) shard.entries.clear();
  shard.entries.emplace(std::string(piece), ids);
}

void Bpe::tokenize(std::string_view piece, std::vector<int64_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  const size_t hash = cacheable ? StringHash{}(piece) : 0;
  if (cacheable && cache_lookup(piece, hash, out)) return;
  std::vector<int32_t>& ids = thread_piece_ids();
  ids.clear();
  initial_symbols(piece, ids);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) cache_store(piece, hash, ids);
  if (ids.capacity() > kMaxRetainedScratch) std::vector<int32_t>().swap(ids);
}

std::optional<int64_t> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::id_to_token(int64_t id) const {
  if (id < 0 || id >= size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

}  // namespace furlong::tokenizer
