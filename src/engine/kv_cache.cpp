#include "engine/kv_cache.h"

#include <ATen/ATen.h>
#include <sys/mman.h>

#include <algorithm>

#include "core/error.h"

namespace furlong::engine {

KvCache::KvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_heads,
                 int64_t head_dim, const c10::TensorOptions& options, int64_t routing_top_k,
                 std::vector<int64_t> layers_without_kv)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      options_(options),
      routing_top_k_(routing_top_k),
      layers_without_kv_(std::move(layers_without_kv)) {
  FURLONG_ASSERT(std::is_sorted(layers_without_kv_.begin(), layers_without_kv_.end()),
                 "kv cache: layers_without_kv must be ascending");
  FURLONG_CHECK(block_size > 0, "kv cache: block size must be positive, got ", block_size);
  FURLONG_CHECK(num_blocks > 0, "kv cache: needs at least one block");
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
  refs_.assign(num_blocks, 0);
  rebuild();
}

int64_t KvCache::bytes_per_token(int64_t kv_layers, int64_t kv_heads, int64_t head_dim,
                                 c10::ScalarType dtype) {
  return 2 * kv_layers * kv_heads * head_dim * static_cast<int64_t>(c10::elementSize(dtype));
}

bool KvCache::has_kv(int64_t layer) const {
  return !std::binary_search(layers_without_kv_.begin(), layers_without_kv_.end(), layer);
}

int64_t KvCache::first_kv_layer() const {
  for (int64_t l = 0; l < num_layers_; ++l) {
    if (has_kv(l)) return l;
  }
  return -1;
}

// One [S, rows, cols] pool, uninitialized. On CPU a private anonymous mapping: its pages are
// allocated (zeroed by the kernel) on first write, so unwritten capacity is not resident, and
// no allocator cache can hand back pages another tensor already touched. `row_major_slots`
// false (K and V on CPU) stores it row by row ([rows, S, cols], viewed as [S, rows, cols]): a
// KV head's rows of consecutive slots are then adjacent, so decode attention streams a block's
// keys of one head (bf16, H = 128, 16-slot blocks: one 4 KiB page) instead of striding over the
// other heads' rows.
at::Tensor KvCache::fresh_pool(int64_t rows, int64_t cols, const c10::TensorOptions& options,
                               bool row_major_slots) const {
  const int64_t S = num_blocks_ * block_size_;
  if (!options.device().is_cpu()) return at::empty({S, rows, cols}, options);
  const size_t bytes = static_cast<size_t>(S * rows * cols) *
                       c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  FURLONG_CHECK(p != MAP_FAILED, "kv cache: cannot map ", bytes,
                " bytes for a layer's pool; lower --max-total-tokens or --mem-fraction-static");
  auto unmap = [bytes](void* ptr) { munmap(ptr, bytes); };
  if (row_major_slots) return at::from_blob(p, {S, rows, cols}, unmap, options);
  return at::from_blob(p, {rows, S, cols}, unmap, options).transpose(0, 1);
}

void KvCache::rebuild() {
  k_.clear();
  v_.clear();
  for (int64_t l = 0; l < num_layers_; ++l) {
    const bool kv = has_kv(l);
    k_.push_back(kv ? fresh_pool(kv_heads_, head_dim_, options_, /*row_major_slots=*/false)
                    : at::Tensor());
    v_.push_back(kv ? fresh_pool(kv_heads_, head_dim_, options_, /*row_major_slots=*/false)
                    : at::Tensor());
  }
  if (routing_top_k_ > 0)
    routing_ = fresh_pool(num_layers_, routing_top_k_, options_.dtype(at::kInt),
                          /*row_major_slots=*/true);
  released_ = false;
}

void KvCache::release() {
  FURLONG_CHECK(num_free_blocks() == num_blocks_,
                "kv cache: cannot release memory while sequences hold blocks");
  k_.clear();
  v_.clear();
  routing_ = at::Tensor();
  released_ = true;
}

std::optional<std::vector<int64_t>> KvCache::allocate_blocks(int64_t count) {
  if (count > num_free_blocks()) return std::nullopt;
  std::vector<int64_t> blocks;
  blocks.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    blocks.push_back(free_.back());
    free_.pop_back();
    refs_[blocks.back()] = 1;
  }
  return blocks;
}

void KvCache::share(const std::vector<int64_t>& blocks) {
  for (int64_t b : blocks) {
    FURLONG_ASSERT(refs_[b] > 0, "kv cache: sharing block ", b, ", which is free");
    ++refs_[b];
  }
}

void KvCache::free(const std::vector<int64_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    FURLONG_ASSERT(refs_[*it] > 0, "kv cache: freeing block ", *it, ", which is free");
    if (--refs_[*it] == 0) free_.push_back(*it);
  }
}

at::Tensor KvCache::slots_for(const std::vector<int64_t>& blocks, int64_t tokens) const {
  FURLONG_ASSERT(blocks_for(tokens) <= static_cast<int64_t>(blocks.size()), "block table of ",
                 blocks.size(), " blocks cannot hold ", tokens, " tokens");
  auto slots = at::empty({tokens}, at::kLong);
  auto* s = slots.data_ptr<int64_t>();
  for (int64_t p = 0; p < tokens; ++p) {
    s[p] = blocks[p / block_size_] * block_size_ + p % block_size_;
  }
  return slots;
}

void KvCache::copy_slots(const at::Tensor& from_host, const at::Tensor& to_host) {
  if (from_host.numel() == 0) return;
  const auto from = from_host.to(options_.device()), to = to_host.to(options_.device());
  for (int64_t l = 0; l < num_layers_; ++l) {
    if (!k_[l].defined()) continue;
    k_[l].index_copy_(0, to, k_[l].index_select(0, from));
    v_[l].index_copy_(0, to, v_[l].index_select(0, from));
  }
  if (routing_.defined()) routing_.index_copy_(0, to, routing_.index_select(0, from));
}

}  // namespace furlong::engine
