#include "backend/batching.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>

#include "core/error.h"

namespace furlong::backend {

std::vector<size_t> dp_shard_indices(size_t num_samples, int dp_rank, int dp_size) {
  std::vector<size_t> out;
  for (size_t i = static_cast<size_t>(dp_rank); i < num_samples;
       i += static_cast<size_t>(dp_size)) {
    out.push_back(i);
  }
  return out;
}

int64_t first_fit_bins(const std::vector<int64_t>& lengths, int64_t capacity) {
  std::vector<int64_t> bins;  // remaining capacity per bin
  for (int64_t len : lengths) {
    bool placed = false;
    for (auto& room : bins) {
      if (len <= room) {
        room -= len;
        placed = true;
        break;
      }
    }
    if (!placed) bins.push_back(std::max<int64_t>(0, capacity - len));
  }
  return static_cast<int64_t>(bins.size());
}

namespace {

// A partial partition: k groups, kept sorted by total weight (descending).
struct Partition {
  std::vector<int64_t> sums;
  std::vector<std::vector<size_t>> groups;
  int64_t spread() const { return sums.front() - sums.back(); }
  void sort_groups() {
    std::vector<size_t> order(sums.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return sums[a] > sums[b]; });
    std::vector<int64_t> s;
    std::vector<std::vector<size_t>> g;
    for (size_t i : order) {
      s.push_back(sums[i]);
      g.push_back(std::move(groups[i]));
    }
    sums = std::move(s);
    groups = std::move(g);
  }
};

}  // namespace

namespace {

// Largest differencing over the starting partial partitions `start` (each of k groups).
std::vector<std::vector<size_t>> merge_partitions(std::vector<Partition> start, int64_t k) {
  auto cmp = [](const Partition& a, const Partition& b) { return a.spread() < b.spread(); };
  std::priority_queue<Partition, std::vector<Partition>, decltype(cmp)> heap(cmp);
  for (auto& p : start) heap.push(std::move(p));
  while (heap.size() > 1) {
    Partition a = heap.top();
    heap.pop();
    Partition b = heap.top();
    heap.pop();
    // Largest of one with smallest of the other: differences shrink.
    for (int64_t g = 0; g < k; ++g) {
      a.sums[g] += b.sums[k - 1 - g];
      auto& src = b.groups[k - 1 - g];
      a.groups[g].insert(a.groups[g].end(), src.begin(), src.end());
    }
    a.sort_groups();
    heap.push(std::move(a));
  }
  auto groups = heap.top().groups;
  for (auto& g : groups) std::sort(g.begin(), g.end());
  return groups;
}

}  // namespace

std::vector<std::vector<size_t>> karmarkar_karp(const std::vector<int64_t>& weights, int64_t k) {
  FURLONG_ASSERT(k >= 1, "karmarkar_karp: k must be >= 1");
  if (weights.empty()) return std::vector<std::vector<size_t>>(k);
  std::vector<Partition> start;
  for (size_t i = 0; i < weights.size(); ++i) {
    Partition p{std::vector<int64_t>(k, 0), std::vector<std::vector<size_t>>(k)};
    p.sums[0] = weights[i];
    p.groups[0].push_back(i);
    start.push_back(std::move(p));
  }
  return merge_partitions(std::move(start), k);
}

std::vector<std::vector<size_t>> karmarkar_karp_equal_size(const std::vector<int64_t>& weights,
                                                           int64_t k) {
  FURLONG_ASSERT(k >= 1 && static_cast<int64_t>(weights.size()) % k == 0,
                 "karmarkar_karp_equal_size: ", weights.size(), " items do not split into ", k);
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return weights[a] < weights[b]; });
  // Each start holds k consecutive items of the sorted order, one per group, so every merge
  // keeps the group sizes equal.
  std::vector<Partition> start;
  for (size_t offset = 0; offset < order.size(); offset += static_cast<size_t>(k)) {
    Partition p{std::vector<int64_t>(k, 0), std::vector<std::vector<size_t>>(k)};
    for (int64_t g = 0; g < k; ++g) {
      const size_t item = order[offset + static_cast<size_t>(g)];
      p.sums[g] = weights[item];
      p.groups[g].push_back(item);
    }
    p.sort_groups();
    start.push_back(std::move(p));
  }
  return merge_partitions(std::move(start), k);
}

std::vector<size_t> balanced_dp_shard_indices(const std::vector<int64_t>& total_lengths,
                                              int dp_rank, int dp_size) {
  FURLONG_CHECK(static_cast<int64_t>(total_lengths.size()) % dp_size == 0,
                "--balance-data: ", total_lengths.size(), " samples do not split into ", dp_size,
                " equal parts (one per data-parallel rank)");
  return karmarkar_karp_equal_size(total_lengths, dp_size)[static_cast<size_t>(dp_rank)];
}

std::vector<int64_t> prompt_ids(const std::vector<std::vector<int64_t>>& prompts) {
  std::map<std::vector<int64_t>, int64_t> ids;
  std::vector<int64_t> out;
  for (const auto& p : prompts) {
    out.push_back(ids.try_emplace(p, static_cast<int64_t>(ids.size())).first->second);
  }
  return out;
}

namespace {

// The step's items for token balancing: runs of samples packed together, with the tokens a
// packed forward holds for them. Without sharing, one item per sample. With it, one per prompt
// group (first-appearance order), cut where adding a sample would take it over `capacity`.
struct Items {
  std::vector<std::vector<size_t>> members;
  std::vector<int64_t> weights;
};

Items balancing_items(const std::vector<size_t>& step, const std::vector<int64_t>& lengths,
                      const SharedPrompts* shared, int64_t capacity) {
  Items items;
  std::map<int64_t, size_t> open;  // prompt id -> the item its next sample joins
  for (size_t i : step) {
    if (shared == nullptr) {
      items.members.push_back({i});
      items.weights.push_back(lengths[i]);
      continue;
    }
    const int64_t id = shared->prompt_id[i], response = lengths[i] - shared->prompt_length[i];
    auto it = open.find(id);
    if (it != open.end() && items.weights[it->second] + response <= capacity) {
      items.members[it->second].push_back(i);
      items.weights[it->second] += response;
      continue;
    }
    open[id] = items.members.size();
    items.members.push_back({i});
    items.weights.push_back(lengths[i]);
  }
  return items;
}

}  // namespace

BatchPlan plan_batches(const std::vector<int64_t>& local_lengths, int64_t total_samples,
                       int dp_size, const BatchingOptions& o,
                       const std::function<int64_t(int64_t)>& all_reduce_max,
                       const SharedPrompts* shared) {
  FURLONG_CHECK(o.global_batch_size > 0 && o.global_batch_size % dp_size == 0,
                "--global-batch-size ", o.global_batch_size,
                " must be a positive multiple of the data-parallel size ", dp_size);
  const int64_t local_gbs = o.global_batch_size / dp_size;
  const int64_t steps = total_samples / o.global_batch_size;
  FURLONG_ASSERT(static_cast<int64_t>(local_lengths.size()) >= steps * local_gbs, "rank holds ",
                 local_lengths.size(), " samples, fewer than ", steps * local_gbs);
  BatchPlan plan;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<size_t> step_items(local_gbs);
    std::iota(step_items.begin(), step_items.end(), static_cast<size_t>(s * local_gbs));
    std::vector<std::vector<size_t>> micro;
    if (!o.dynamic) {
      FURLONG_CHECK(o.micro_batch_size > 0, "--micro-batch-size must be positive");
      int64_t count = local_gbs / o.micro_batch_size;
      FURLONG_CHECK(count > 0, "--micro-batch-size ", o.micro_batch_size,
                    " exceeds the per-rank batch of ", local_gbs, " samples");
      for (int64_t m = 0; m < count; ++m) {
        micro.emplace_back(step_items.begin() + m * o.micro_batch_size,
                           step_items.begin() + (m + 1) * o.micro_batch_size);
      }
    } else {
      const auto items = balancing_items(step_items, local_lengths, shared, o.max_tokens_per_gpu);
      int64_t k = all_reduce_max(first_fit_bins(items.weights, o.max_tokens_per_gpu));
      for (auto& group : karmarkar_karp(items.weights, k)) {
        std::vector<size_t> samples;
        for (size_t j : group) {
          samples.insert(samples.end(), items.members[j].begin(), items.members[j].end());
        }
        std::sort(samples.begin(), samples.end());
        micro.push_back(std::move(samples));
      }
    }
    plan.push_back(std::move(micro));
  }
  return plan;
}

}  // namespace furlong::backend
