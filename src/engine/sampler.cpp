#include "engine/sampler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "kernels/argmax.h"
#include "models/logprobs.h"

namespace furlong::engine {

Candidates sampling_candidates(const at::Tensor& logits_V, const SamplingParams& params) {
  FURLONG_ASSERT(logits_V.dim() == 1 && logits_V.scalar_type() == at::kFloat &&
                     logits_V.is_contiguous() && logits_V.device().is_cpu(),
                 "sampling_candidates expects contiguous fp32 CPU logits");
  const int64_t V = logits_V.size(0);
  const float* z = logits_V.data_ptr<float>();
  const double inv_t = 1.0 / params.temperature;
  // Candidate ids in descending logit order: the top k only when top-k is on (partial sort),
  // else all of them (sorted only when top-p needs the order).
  const int64_t k = params.top_k > 0 ? std::min(params.top_k, V) : V;
  std::vector<int64_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int64_t a, int64_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  if (k < V) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
    ids.resize(k);
  } else if (params.top_p < 1.0 || params.min_p > 0.0) {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  // Softmax over the candidates (the top-k renormalization), in fp64.
  double max_z = -INFINITY;
  for (auto id : ids) max_z = std::max(max_z, static_cast<double>(z[id]));
  std::vector<double> probs(ids.size());
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    probs[i] = std::exp((z[ids[i]] - max_z) * inv_t);
    sum += probs[i];
  }
  for (auto& p : probs) p /= sum;
  size_t keep = ids.size();
  if (params.top_p < 1.0) {
    // Smallest prefix (in descending order) whose mass reaches top_p.
    double cumulative = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cumulative += probs[i];
      if (cumulative >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params.min_p > 0.0) {
    const double floor = params.min_p * probs[0];  // probs[0] is the largest
    size_t i = 1;
    while (i < keep && probs[i] >= floor) ++i;
    keep = i;
  }
  ids.resize(keep);
  probs.resize(keep);
  double kept = std::accumulate(probs.begin(), probs.end(), 0.0);
  for (auto& p : probs) p /= kept;
  return {std::move(ids), std::move(probs)};
}

int64_t sample_token(const at::Tensor& logits_V, const SamplingParams& params,
                     std::mt19937_64& rng) {
  if (params.temperature == 0.0) {
    return kernels::argmax_row_supported(logits_V) ? kernels::argmax_row(logits_V)
                                                   : logits_V.argmax().item<int64_t>();
  }
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  double u = uniform(rng), cumulative = 0;
  if (params.top_k <= 0 && params.top_p >= 1.0 && params.min_p <= 0.0) {
    // No filtering: inverse CDF over the unsorted vocabulary (vectorized softmax, then a scan).
    auto probs_V =
        at::softmax(params.temperature == 1.0 ? logits_V : logits_V / params.temperature, 0);
    const float* p = probs_V.data_ptr<float>();
    const int64_t V = probs_V.size(0);
    int64_t last_nonzero = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (p[i] <= 0.0f) continue;
      cumulative += p[i];
      last_nonzero = i;
      if (u < cumulative) return i;
    }
    return last_nonzero;  // u within rounding of the total mass
  }
  auto c = sampling_candidates(logits_V, params);
  for (size_t i = 0; i < c.ids.size(); ++i) {
    cumulative += c.probs[i];
    if (u < cumulative) return c.ids[i];
  }
  return c.ids.back();  // u within rounding of 1
}

void apply_penalties(at::Tensor& logits_V, const SamplingParams& params,
                     const std::unordered_map<int64_t, int64_t>& counts, int64_t generated,
                     const std::vector<int64_t>& stop_ids) {
  if (!params.penalized()) return;
  FURLONG_ASSERT(logits_V.dim() == 1 && logits_V.scalar_type() == at::kFloat &&
                     logits_V.is_contiguous() && logits_V.device().is_cpu(),
                 "apply_penalties expects contiguous fp32 CPU logits");
  float* z = logits_V.data_ptr<float>();
  const int64_t V = logits_V.size(0);
  const auto rep = static_cast<float>(params.repetition_penalty);
  const auto freq = static_cast<float>(params.frequency_penalty);
  const auto pres = static_cast<float>(params.presence_penalty);
  for (const auto& [id, count] : counts) {
    if (id < 0 || id >= V || count <= 0) continue;
    if (rep != 1.0f) z[id] = z[id] < 0 ? z[id] * rep : z[id] / rep;
    z[id] -= freq * static_cast<float>(count) + pres;
  }
  if (generated < params.min_new_tokens) {
    for (auto id : stop_ids) {
      if (id >= 0 && id < V) z[id] = -INFINITY;
    }
  }
}

TopLogprobs top_logprobs(const at::Tensor& logits_V, double temperature, int64_t top_n) {
  const int64_t n = std::min<int64_t>(top_n, logits_V.size(0));
  if (n <= 0) return {};
  auto ids = std::get<1>(logits_V.to(at::kFloat).topk(n));
  auto rows = logits_V.unsqueeze(0).expand({n, logits_V.size(0)});
  auto lp = models::logprobs_from_logits(rows, ids, temperature == 0.0 ? 1.0 : temperature)
                .to(at::kCPU)
                .contiguous();
  auto ids_cpu = ids.to(at::kCPU).contiguous();
  TopLogprobs top;
  top.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    top.emplace_back(ids_cpu.data_ptr<int64_t>()[i], lp.data_ptr<float>()[i]);
  }
  return top;
}

}  // namespace furlong::engine
