// Shared-prompt packing (models::pack_sequences with share_prompts): the packed layout, and that
// it computes the model function of the unshared packing, log-probs and gradients alike, for
// every attention family, both attention implementations and an MoE model; models whose layers
// cannot continue a shared prompt (Gated DeltaNet) refuse such a batch.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/random_models.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "models/causal_lm.h"
#include "models/packed_batch.h"

namespace furlong::models {
namespace {

using testing::TinyFamily;

// Prompts p1 (5 tokens) and p2 (4): two samples continue p1, one p2, one is p1 alone.
struct Sequences {
  std::vector<std::vector<int64_t>> tokens = {{3, 9, 4, 11, 7, 20, 21, 22, 23},
                                              {3, 9, 4, 11, 7, 30, 31, 32},
                                              {5, 6, 8, 2, 40, 41, 42, 43, 44},
                                              {3, 9, 4, 11, 7}};
  std::vector<int64_t> prompts = {5, 5, 4, 5};
  std::vector<const std::vector<int64_t>*> views() const {
    std::vector<const std::vector<int64_t>*> out;
    for (const auto& t : tokens) out.push_back(&t);
    return out;
  }
};

TEST(PackSequences, HoldsEachPromptOnceAndContinuesItsPositions) {
  Sequences s;
  auto shared = pack_sequences(s.views(), s.prompts, /*share_prompts=*/true);
  // p1, its two continuations, p2, its continuation; the prompt-only sample adds nothing.
  EXPECT_EQ(shared.batch.cu_seqlens, (std::vector<int64_t>{0, 5, 9, 12, 16, 21}));
  ASSERT_EQ(shared.batch.prefixes.size(), 5u);
  EXPECT_EQ(shared.batch.prefix(1).start, 0);
  EXPECT_EQ(shared.batch.prefix(1).length, 5);
  EXPECT_EQ(shared.batch.prefix(2).length, 5);
  EXPECT_EQ(shared.batch.prefix(3).length, 0);
  EXPECT_EQ(shared.batch.prefix(4).start, 12);
  EXPECT_EQ(shared.batch.prefix(4).length, 4);
  auto positions = shared.batch.position_ids_P;
  EXPECT_EQ(positions[9].item<int64_t>(), 5);   // sample 1's first response token
  EXPECT_EQ(positions[16].item<int64_t>(), 4);  // sample 2's
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    for (size_t j = 0; j < s.tokens[i].size(); ++j) {
      EXPECT_EQ(shared.batch.tokens_P[shared.row(i, static_cast<int64_t>(j))].item<int64_t>(),
                s.tokens[i][j])
          << i << "," << j;
    }
  }
  EXPECT_EQ(shared.row(3, 4), 4);  // the prompt-only sample's last token is p1's

  auto whole = pack_sequences(s.views(), s.prompts, /*share_prompts=*/false);
  EXPECT_EQ(whole.batch.cu_seqlens, (std::vector<int64_t>{0, 9, 17, 26, 31}));
  EXPECT_FALSE(whole.batch.has_prefixes());
  EXPECT_EQ(whole.row(1, 6), 15);

  auto bad = testing::error_of([&] { pack_sequences(s.views(), {5, 9, 4, 5}, true); });
  EXPECT_NE(bad.find("sequence 1 has 8 tokens and a prompt of 9"), std::string::npos) << bad;
}

struct Scored {
  at::Tensor logprobs_T;
  std::vector<at::Tensor> grads;
};

// Log-probs of every token after a prompt and the gradient of a fixed random weighting of them.
Scored score(const Json& config, bool share, AttnImpl attn) {
  auto model = testing::random_model(config, 11);
  for (auto& unit : model->weights()) {
    for (auto& t : unit) t = t.to(at::kDouble);
  }
  model->set_requires_grad(true);
  Sequences s;
  auto packed = pack_sequences(s.views(), s.prompts, share);
  std::vector<int64_t> rows, targets;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    for (auto j = s.prompts[i]; j < static_cast<int64_t>(s.tokens[i].size()); ++j) {
      rows.push_back(packed.row(i, j - 1));
      targets.push_back(s.tokens[i][static_cast<size_t>(j)]);
    }
  }
  auto hidden_PD = model->forward_hidden(packed.batch, {.attn = attn, .moe = {}});
  const auto& w = model->weights();
  // Plain float64 autograd for the head (token_logprobs computes its softmax in fp32).
  auto logits_TV = at::linear(hidden_PD.index_select(0, at::tensor(rows, at::kLong)),
                              model->head_weight(w[CausalLM::kEmbedUnit], w[model->final_unit()]));
  auto lp = at::log_softmax(logits_TV, -1)
                .gather(1, at::tensor(targets, at::kLong).unsqueeze(1))
                .squeeze(1);
  at::manual_seed(5);
  (lp * at::randn(lp.sizes(), lp.options())).sum().backward();
  Scored out{lp.detach(), {}};
  for (const auto& [name, t] : model->named_weights()) {
    out.grads.push_back(t.grad().defined() ? t.grad() : at::zeros_like(t));
  }
  return out;
}

class SharedPrompts : public ::testing::TestWithParam<std::tuple<TinyFamily, AttnImpl>> {};

// Both packings compute the same function: every token sees the same tokens at the same
// positions. The model runs in float64 except where transformers' rules round to fp32 (RMSNorm
// normalizes in fp32), so the two differ by fp32 roundings there: an output element of a norm
// moves by at most one fp32 ulp (u = 2^-24, relative) when its float64 inputs, which agree to
// ~1e-15, fall on either side of a rounding boundary. Two layers of three norms, each such
// difference amplified at most tenfold by what follows, bound the difference by 64 u of the
// values' scale (3.8e-6); a wrong mask or a wrong position moves them by order 0.1.
TEST_P(SharedPrompts, GiveTheUnsharedLogProbsAndGradients) {
  auto [family, attn] = GetParam();
  auto config = testing::tiny_model_config(family, {{"vocab_size", 64}});
  auto shared = score(config, true, attn), whole = score(config, false, attn);
  const double bound = 64 * testing::tol::kUFp32;
  const double lp_scale = std::max(1.0, whole.logprobs_T.abs().max().item<double>());
  EXPECT_LE(testing::tol::noted("shared_prompt_logprob",
                                testing::max_abs_diff(shared.logprobs_T, whole.logprobs_T),
                                bound * lp_scale),
            bound * lp_scale);
  ASSERT_EQ(shared.grads.size(), whole.grads.size());
  for (size_t i = 0; i < shared.grads.size(); ++i) {
    const double scale = std::max(1.0, whole.grads[i].abs().max().item<double>());
    EXPECT_LE(
        testing::tol::noted("shared_prompt_grad",
                            testing::max_abs_diff(shared.grads[i], whole.grads[i]), bound * scale),
        bound * scale)
        << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, SharedPrompts,
    ::testing::Combine(::testing::Values(TinyFamily::kQwen3, TinyFamily::kLlama, TinyFamily::kQwen2,
                                         TinyFamily::kQwen3Moe),
                       ::testing::Values(AttnImpl::kSdpa, AttnImpl::kEager)));

TEST(SharedPrompts, AModelWithLinearAttentionRefusesThem) {
  auto model = testing::random_model(testing::tiny_qwen3_5_config({{"vocab_size", 64}}), 1);
  EXPECT_FALSE(model->supports_shared_prefixes());
  Sequences s;
  auto packed = pack_sequences(s.views(), s.prompts, true);
  auto message = testing::error_of([&] { model->forward_hidden(packed.batch); });
  EXPECT_NE(message.find("--no-pack-shared-prompts"), std::string::npos) << message;
  // Unshared packing is what such a model gets.
  EXPECT_EQ(model->forward_hidden(pack_sequences(s.views(), s.prompts, false).batch).size(0), 31);
}

}  // namespace
}  // namespace furlong::models
