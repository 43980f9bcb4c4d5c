#include "rl/layout.h"

#include <ATen/ATen.h>

#include <numeric>

#include "core/error.h"

namespace furlong::rl {

int64_t ResponseLayout::num_tokens() const {
  return std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
}

ResponseLayout ResponseLayout::to(const at::Device& device) const {
  return {.lengths = lengths,
          .loss_mask_T = loss_mask_T.to(device),
          .sample_T = sample_T.to(device),
          .denominator_S = denominator_S.to(device)};
}

at::Tensor concat_tokens(const std::vector<at::Tensor>& per_sample_T) {
  if (per_sample_T.empty()) return at::zeros({0}, at::kFloat);
  return at::cat(per_sample_T);
}

at::Tensor fp32_tensor(const std::vector<float>& values) {
  return at::tensor(values, at::kFloat).reshape({static_cast<int64_t>(values.size())});
}

namespace {

at::Tensor sample_index_of_tokens(const std::vector<int64_t>& lengths, int64_t total,
                                  const at::Device& device) {
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(total));
  for (size_t i = 0; i < lengths.size(); ++i) ids.insert(ids.end(), lengths[i], int64_t(i));
  return at::tensor(ids, at::kLong).reshape({total}).to(device);
}

at::Tensor per_sample_sums(const at::Tensor& x_T, const ResponseLayout& layout) {
  auto masked_T = x_T * layout.loss_mask_T;
  return at::zeros({layout.num_samples()}, masked_T.options())
      .index_add(0, layout.sample_T, masked_T);
}

void check_token_tensor(const at::Tensor& x_T, const ResponseLayout& layout, const char* what) {
  FURLONG_CHECK(x_T.dim() == 1 && x_T.size(0) == layout.loss_mask_T.size(0), what,
                ": expected a 1-D tensor of ", layout.loss_mask_T.size(0),
                " response tokens, got shape ", x_T.sizes());
}

}  // namespace

ResponseLayout make_response_layout(std::vector<int64_t> lengths, const at::Tensor& loss_mask_T,
                                    const std::optional<std::vector<double>>& denominators) {
  ResponseLayout layout;
  int64_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    FURLONG_CHECK(lengths[i] >= 0, "response layout: sample ", i, " has negative length ",
                  lengths[i]);
    total += lengths[i];
  }
  FURLONG_CHECK(loss_mask_T.dim() == 1 && loss_mask_T.size(0) == total,
                "response layout: loss mask has shape ", loss_mask_T.sizes(), " but the ",
                lengths.size(), " response lengths sum to ", total);
  layout.lengths = std::move(lengths);
  layout.loss_mask_T = loss_mask_T.to(at::kFloat);
  layout.sample_T = sample_index_of_tokens(layout.lengths, total, loss_mask_T.device());
  if (denominators) {
    FURLONG_CHECK(denominators->size() == layout.lengths.size(),
                  "response layout: ", denominators->size(), " loss denominators for ",
                  layout.lengths.size(), " samples");
    std::vector<float> d(denominators->begin(), denominators->end());
    layout.denominator_S =
        at::tensor(d, at::kFloat).reshape({layout.num_samples()}).to(loss_mask_T.device());
  } else {
    layout.denominator_S = at::zeros({layout.num_samples()}, layout.loss_mask_T.options())
                               .index_add(0, layout.sample_T, layout.loss_mask_T);
  }
  return layout;
}

at::Tensor sum_of_sample_mean(const at::Tensor& x_T, const ResponseLayout& layout) {
  check_token_tensor(x_T, layout, "sum_of_sample_mean");
  return (per_sample_sums(x_T, layout) / layout.denominator_S.clamp_min(1.0)).sum();
}

at::Tensor sum_of_token_values(const at::Tensor& x_T, const ResponseLayout& layout) {
  check_token_tensor(x_T, layout, "sum_of_token_values");
  return (x_T * layout.loss_mask_T).sum();
}

at::Tensor reduce_tokens(const at::Tensor& x_T, const ResponseLayout& layout, bool per_token) {
  return per_token ? sum_of_token_values(x_T, layout) : sum_of_sample_mean(x_T, layout);
}

at::Tensor masked_mean_per_sample(const at::Tensor& x_T, const ResponseLayout& layout) {
  check_token_tensor(x_T, layout, "masked_mean_per_sample");
  auto mask_sum_S = at::zeros({layout.num_samples()}, layout.loss_mask_T.options())
                        .index_add(0, layout.sample_T, layout.loss_mask_T);
  return per_sample_sums(x_T, layout) / mask_sum_S.clamp_min(1.0);
}

at::Tensor broadcast_to_tokens(const at::Tensor& v_S, const ResponseLayout& layout) {
  FURLONG_CHECK(v_S.dim() == 1 && v_S.size(0) == layout.num_samples(),
                "broadcast_to_tokens: expected one value per sample (", layout.num_samples(),
                "), got shape ", v_S.sizes());
  return v_S.index_select(0, layout.sample_T);
}

}  // namespace furlong::rl
