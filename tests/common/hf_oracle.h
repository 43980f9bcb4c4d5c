// What the transformers-parity tests of models/ share: running scripts/oracles/hf_model_oracle.py
// on a plan (cached), the next-token targets of packed documents, the fp32 log_softmax
// rounding bound over the scored rows, and the MoE routing comparisons.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "core/json_util.h"
#include "io/safetensors.h"
#include "models/moe.h"

namespace furlong::testing {

// The oracle's output directory for `plan` (a list of cases, see the script's docstring),
// computed once per plan and cached under `cache_name`.
inline std::filesystem::path run_hf_model_oracle(const std::string& cache_name, const Json& plan) {
  return cached_oracle(
      cache_name, "oracles/hf_model_oracle.py", plan.dump(), [&](const std::filesystem::path& dir) {
        write_file_atomic(dir / "plan.json", plan.dump());
        return std::vector<std::string>{(dir / "plan.json").string(), dir.string()};
      });
}

// targets[t] = the next token of the same document, valid[t] = it exists and (with `masks`) is
// masked in.
inline std::pair<at::Tensor, at::Tensor> next_token_targets(
    const std::vector<std::vector<int64_t>>& docs,
    const std::vector<std::vector<int64_t>>* masks = nullptr) {
  std::vector<int64_t> targets;
  std::vector<uint8_t> valid;
  for (size_t d = 0; d < docs.size(); ++d) {
    for (size_t i = 0; i < docs[d].size(); ++i) {
      const bool last = i + 1 == docs[d].size();
      targets.push_back(last ? 0 : docs[d][i + 1]);
      valid.push_back(!last && (masks == nullptr || (*masks)[d][i + 1] != 0));
    }
  }
  const auto n = static_cast<int64_t>(targets.size());
  return {at::from_blob(targets.data(), {n}, at::kLong).clone(),
          at::from_blob(valid.data(), {n}, at::kByte).clone().to(at::kBool)};
}

// max over the scored rows of one implementation's fp32 log_softmax rounding bound.
inline double max_logprob_rounding(const at::Tensor& ref_logits_TV,
                                   const std::vector<std::vector<int64_t>>& docs) {
  auto [targets, valid] = next_token_targets(docs);
  double worst = 0;
  for (int64_t r = 0; r < ref_logits_TV.size(0); ++r) {
    if (!valid[r].item<bool>()) continue;
    worst = std::max(
        worst,
        tol::fp32_softmax_row_bound(ref_logits_TV[r], targets[r].item<int64_t>()).logprob_rounding);
  }
  return worst;
}

// furlong's recorded expert ids ([P, L, K], -1 for dense layers) against transformers' (the
// oracle's "routing"), token for token and in the router's order; each mismatch is a failure
// that prints the oracle's margin p_(K) - p_(K+1) there. Returns the number of mismatches.
inline int64_t routing_mismatches(const models::MoeTrace& trace, const io::SafetensorsFile& ref,
                                  const Json& config) {
  auto ref_TLK = ref.tensor("routing");
  auto ours_TLK = trace.recorded_PLK(config["num_hidden_layers"].get<int64_t>(),
                                     config["num_experts_per_tok"].get<int64_t>());
  EXPECT_EQ(ours_TLK.sizes(), ref_TLK.sizes());
  if (ours_TLK.sizes() != ref_TLK.sizes()) return -1;
  auto differ_TL = (ours_TLK != ref_TLK).any(-1);
  auto where = differ_TL.nonzero();
  auto gap_TL = ref.tensor("routing_gap");
  for (int64_t i = 0; i < where.size(0); ++i) {
    int64_t t = where[i][0].item<int64_t>(), l = where[i][1].item<int64_t>();
    ADD_FAILURE() << "token " << t << " layer " << l << ": furlong chose " << ours_TLK[t][l]
                  << ", transformers " << ref_TLK[t][l] << " (margin "
                  << gap_TL[t][l].item<double>() << ")";
  }
  return where.size(0);
}

inline std::shared_ptr<models::MoeTrace> recording_trace() {
  auto trace = std::make_shared<models::MoeTrace>();
  trace->record = true;
  return trace;
}

// Whether fp32 routing can differ between two implementations whose router logits differ by at
// most dz: softmax probabilities then differ by |dp_i| <= 2 dz p_i, so the k-th and (k+1)-th
// choices can swap only where the oracle's margin p_(K) - p_(K+1) is at most
// 2 dz (p_(K) + p_(K+1)). Counts those near-ties; worst = max of that bound over the margin.
struct RoutingMargin {
  int64_t near_ties = 0;
  double worst = 0;
  double min_margin = 0;
};
inline RoutingMargin routing_margin(const io::SafetensorsFile& ref, double dz, int64_t K) {
  auto top_TLk = std::get<0>(at::topk(ref.tensor("router_probs"), K + 1, -1));
  auto needed_TL = 2 * dz * (top_TLk.select(-1, K - 1) + top_TLk.select(-1, K));
  auto gap_TL = ref.tensor("routing_gap");
  return {(gap_TL <= needed_TL).sum().item<int64_t>(), (needed_TL / gap_TL).max().item<double>(),
          gap_TL.min().item<double>()};
}

}  // namespace furlong::testing
