// The paged KV cache: per layer, K and V pools of `num_blocks` fixed-size blocks of
// `block_size` token slots each ([num_blocks * block_size, K, H], addressed by slot index =
// block * block_size + offset). A sequence owns a list of blocks (its block table); token
// position p of the sequence lives in slot table[p / block_size] * block_size + p % block_size.
//
// Blocks are reference-counted: the samples of one prompt share the prompt's full blocks
// (engine_schedule.cpp, prefix sharing). allocate() hands out blocks with one reference,
// share() adds one, free() drops one; a block is free again when its last reference goes, so
// a shared block is counted once in num_free_blocks().
//
// Hybrid models (Qwen3.5): only the softmax-attention layers have K/V pools; the DeltaNet
// layers keep a fixed-size state per sequence instead, outside this cache.
//
// Routing (EngineOptions::record_routed_experts): beside K and V, an int32 pool [S, L, K] of the
// top-k expert ids every MoE layer chose for the token in each slot (SGLang's per-KV-slot host
// buffer of routed experts), written by the forward that writes the slot's K/V. Slots shared
// between sequences (prefix sharing) thus carry the routing recorded when they were filled.
//
// Layout: on CPU each K and V pool is stored head-major ([K, S, H] in memory, the tensor a
// [S, K, H] view of it with strides (H, S * H, 1)), so one head's rows of a block's slots are
// adjacent for decode attention; on CUDA it is contiguous [S, K, H]. Either way callers index
// it as [S, K, H].
//
// Memory: the pools are allocated uninitialized (never zero-filled); on CPU as fresh anonymous
// pages, so capacity no sequence has written costs no resident memory. Readers only read slots
// their sequence wrote (paged_forward.cpp pads its decode gather with the sequence's own slot 0).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace furlong::engine {

class KvCache {
 public:
  // routing_top_k > 0 adds the routing pool (num_layers x routing_top_k ids per slot).
  // `layers_without_kv` (ascending) have no K/V pools: the DeltaNet layers of hybrid models,
  // which keep a per-sequence state instead (engine_impl.h, Sequence::linear_state).
  KvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_heads,
          int64_t head_dim, const c10::TensorOptions& options, int64_t routing_top_k = 0,
          std::vector<int64_t> layers_without_kv = {});

  // Bytes of K and V over `kv_layers` layers for one token slot.
  static int64_t bytes_per_token(int64_t kv_layers, int64_t kv_heads, int64_t head_dim,
                                 c10::ScalarType dtype);
  // Bytes of the routing pool for one token slot (int32 ids of every layer).
  static int64_t routing_bytes_per_token(int64_t num_layers, int64_t top_k) {
    return num_layers * top_k * 4;
  }

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t capacity_tokens() const { return num_blocks_ * block_size_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  int64_t references(int64_t block) const { return refs_[block]; }

  // Blocks for `tokens` token slots (one reference each), or nullopt when not enough are free
  // (nothing taken).
  std::optional<std::vector<int64_t>> allocate_tokens(int64_t tokens) {
    return allocate_blocks(blocks_for(tokens));
  }
  std::optional<std::vector<int64_t>> allocate_blocks(int64_t count);
  std::optional<std::vector<int64_t>> allocate(int64_t tokens) { return allocate_tokens(tokens); }
  // One more reference to each of `blocks` (all held already).
  void share(const std::vector<int64_t>& blocks);
  // Drops one reference to each of `blocks`; blocks left with none are free.
  void free(const std::vector<int64_t>& blocks);

  // Slot index of every position 0..tokens-1 under a block table (int64 [tokens], on the host:
  // the engine builds each step's indices there and uploads them once).
  at::Tensor slots_for(const std::vector<int64_t>& blocks, int64_t tokens) const;
  // Copies K and V (and the routing) of slots `from` to slots `to` (host int64 indices) in every
  // layer (bit-exact).
  void copy_slots(const at::Tensor& from_host, const at::Tensor& to_host);

  // [S, K, H] (see Layout), S = blocks * size; undefined for a layer without K/V.
  at::Tensor& k(int64_t layer) { return k_[layer]; }
  at::Tensor& v(int64_t layer) { return v_[layer]; }
  bool has_kv(int64_t layer) const;
  int64_t first_kv_layer() const;  // -1 when no layer has K/V
  bool records_routing() const { return routing_top_k_ > 0; }
  at::Tensor& routing() { return routing_; }  // int32 [S, L, K] (records_routing() only)

  // Frees the pools' memory (allocation state is kept; every block must be free).
  void release();
  void rebuild();
  bool released() const { return released_; }

 private:
  at::Tensor fresh_pool(int64_t rows, int64_t cols, const c10::TensorOptions& options,
                        bool row_major_slots) const;

  int64_t num_layers_, num_blocks_, block_size_, kv_heads_, head_dim_;
  c10::TensorOptions options_;
  int64_t routing_top_k_ = 0;
  std::vector<int64_t> layers_without_kv_;
  std::vector<at::Tensor> k_, v_;  // indexed by layer; undefined for layers without K/V
  at::Tensor routing_;
  std::vector<int64_t> free_;  // a stack: lowest block ids handed out first
  std::vector<int32_t> refs_;  // references per block (0 = free)
  bool released_ = false;
};

}  // namespace furlong::engine
