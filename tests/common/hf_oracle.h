// What the transformers-parity tests of models/ share: running scripts/oracles/hf_model_oracle.py
// on a plan (cached), the next-token targets of packed documents, and the fp32 log_softmax
// rounding bound over the scored rows.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "core/json_util.h"

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

}  // namespace furlong::testing
