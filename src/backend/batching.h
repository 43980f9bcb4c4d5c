// Splitting a rollout's samples across data-parallel ranks, into optimizer steps and into
// micro-batches (miles' FSDP rules):
//   * rank r trains on samples r, r + W, r + 2W, ... (W = data-parallel world size);
//   * local_gbs = GBS / W samples per step; steps = floor(total samples / GBS) on every rank (so
//     all ranks run the same number of steps; leftovers are dropped, as miles does);
//   * static: micro-batches of --micro-batch-size consecutive samples (floor(local_gbs / mbs));
//   * dynamic: per step, the number of first-fit bins of capacity --max-tokens-per-gpu (a sample
//     longer than that gets its own bin), maxed over ranks so FSDP collectives line up, then a
//     Karmarkar-Karp partition of the step's samples into exactly that many groups balancing
//     token counts (counts may differ; a group may be empty when a rank has fewer samples).
//     With shared prompts (SharedPrompts below), the items binned and balanced are the step's
//     prompt groups instead of its samples, weighted by what a packed forward computes for them
//     (prompt once plus every response), so that a group's samples land in one micro-batch and
//     share its prompt there; a group over the budget is cut into pieces that fit.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace furlong::backend {

std::vector<size_t> dp_shard_indices(size_t num_samples, int dp_rank, int dp_size);
// --balance-data (miles): rank r's samples are part r of an equal-count Karmarkar-Karp
// partition of the rollout by total length (prompt + response tokens), in index order.
std::vector<size_t> balanced_dp_shard_indices(const std::vector<int64_t>& total_lengths,
                                              int dp_rank, int dp_size);

struct BatchingOptions {
  int64_t global_batch_size = 0;
  int64_t micro_batch_size = 1;
  bool dynamic = false;
  int64_t max_tokens_per_gpu = 0;
};

// steps[s][m] = indices (into the local sample list) of micro-batch m of optimizer step s.
using BatchPlan = std::vector<std::vector<std::vector<size_t>>>;

// Which local samples share a prompt (equal ids; models::pack_sequences holds it once) and the
// prompt's length, per local sample.
struct SharedPrompts {
  std::vector<int64_t> prompt_id;
  std::vector<int64_t> prompt_length;
};
// Ids for `prompts` (token lists): equal lists get equal ids.
std::vector<int64_t> prompt_ids(const std::vector<std::vector<int64_t>>& prompts);

// `all_reduce_max` returns the maximum of a value over the data-parallel ranks (collective;
// identity in a single process).
BatchPlan plan_batches(const std::vector<int64_t>& local_lengths, int64_t total_samples,
                       int dp_size, const BatchingOptions& options,
                       const std::function<int64_t(int64_t)>& all_reduce_max,
                       const SharedPrompts* shared = nullptr);

// First-fit bin count for the given lengths and capacity.
int64_t first_fit_bins(const std::vector<int64_t>& lengths, int64_t capacity);
// Karmarkar-Karp (largest differencing) partition of items into k groups balancing the sum of
// `weights`; returns item indices per group (k groups, possibly empty when k > items).
std::vector<std::vector<size_t>> karmarkar_karp(const std::vector<int64_t>& weights, int64_t k);
// The same with k groups of equal size (weights.size() must be a multiple of k): starts from
// runs of k consecutive items of the ascending order, one item per group.
std::vector<std::vector<size_t>> karmarkar_karp_equal_size(const std::vector<int64_t>& weights,
                                                           int64_t k);

}  // namespace furlong::backend
