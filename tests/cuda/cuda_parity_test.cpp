// The CUDA path against the CPU path on the tiny Qwen3 (tests/cuda/cuda_test_util.h): model
// logits in fp32, the engine's bf16 log-probs against the trainer's recomputation on the GPU
// (exact log-probs on and off), and one single-rank FSDP optimizer step. Each skips without a
// GPU; FURLONG_CUDA_TESTS_ON_CPU=1 runs the same comparisons CPU against CPU.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <random>

#include "common/tolerances.h"
#include "cuda_test_util.h"
#include "dist/mesh.h"
#include "engine/engine.h"
#include "fsdp/fsdp_model.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/layers.h"
#include "models/logprobs.h"
#include "models/registry.h"
#include "optim/adamw.h"

namespace furlong {
namespace {

namespace tol = furlong::testing::tol;
using cuda_testing::record;

constexpr int64_t kLayers = 2, kMaxReduction = 128;  // tiny Qwen3: 2 layers, MLP width 128

std::vector<std::vector<int64_t>> docs_of(const std::vector<int>& lengths, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> token(0, 31);
  std::vector<std::vector<int64_t>> docs;
  for (int len : lengths) {
    std::vector<int64_t> d(len);
    for (auto& t : d) t = token(rng);
    docs.push_back(d);
  }
  return docs;
}

// Logits [P, V] in fp32 on the CPU, and the scale of their dot products (head_abs_scale).
std::pair<at::Tensor, double> logits_on(const models::CausalLM& model,
                                        const models::PackedBatch& batch, c10::Device device) {
  c10::InferenceMode guard;
  auto hidden_PD = model.forward_hidden(batch.to(device));
  const auto& w = model.weights();
  const auto& head_VD = model.head_weight(w[models::CausalLM::kEmbedUnit], w[model.final_unit()]);
  auto logits_PV = at::mm(hidden_PD, head_VD.t()).to(at::kCPU, at::kFloat);
  return {logits_PV, tol::head_abs_scale(hidden_PD.cpu(), head_VD.cpu())};
}

// Packed-document attention in bf16 on the device (one varlen flash-attention call on CUDA,
// models/layers.cpp) against the fp32 eager reference on the CPU, from the same bf16 inputs
// (3 documents, GQA 4:2, head 64). The output is a convex combination of value rows: rounding
// the probabilities to bf16 before the PV product and the output to bf16 each cost at most
// 2^-8 of max|v|, so 3 * 2^-8 * max|v| bounds the difference. Backward runs and is finite.
TEST(CudaModelParity, Bf16PackedAttentionMatchesTheFp32Reference) {
  FURLONG_REQUIRE_TEST_DEVICE(device);
  const auto batch = models::PackedBatch::from_documents(docs_of({5, 17, 9}, 7));
  const int64_t P = batch.num_tokens(), N = 4, K = 2, H = 64;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto q = at::randn({P, N, H}, gen).to(at::kBFloat16);
  auto k = at::randn({P, K, H}, gen).to(at::kBFloat16);
  auto v = at::randn({P, K, H}, gen).to(at::kBFloat16);
  const double scale = 1.0 / std::sqrt(static_cast<double>(H));
  auto reference = models::attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), batch,
                                     models::AttnImpl::kEager, scale);
  auto q_dev = q.to(device).requires_grad_(true);
  auto out =
      models::attention(q_dev, k.to(device), v.to(device), batch, models::AttnImpl::kSdpa, scale);
  const double bound = 3.0 * std::ldexp(1.0, -8) * v.to(at::kFloat).abs().max().item<double>();
  const double err = (out.to(at::kCPU, at::kFloat) - reference).abs().max().item<double>();
  record("bf16_packed_attention", {{"max_abs_err", err}, {"bound", bound}});
  EXPECT_LE(err, bound);
  out.to(at::kFloat).sum().backward();
  ASSERT_TRUE(q_dev.grad().defined());
  EXPECT_TRUE(at::isfinite(q_dev.grad()).all().item<bool>());
}

// fp32 forward on the device against the CPU's, from the same HF directory. Each is within the
// fp32 rounding budget of the exact logits (tol::forward_logits_budget: 9 reductions per layer
// plus the final norm and head, each of at most 128 terms), so they differ by at most twice it.
// TF32 would break this (10-bit products): libtorch leaves it off for matmuls by default.
TEST(CudaModelParity, Fp32LogitsMatchTheCpuPath) {
  FURLONG_REQUIRE_TEST_DEVICE(device);
  const auto dir = cuda_testing::write_tiny_model("parity_fp32", 3, "float32");
  auto cpu = models::load_hf_model(dir, {.dtype = at::kFloat, .device = c10::kCPU});
  auto dev = models::load_hf_model(dir, {.dtype = at::kFloat, .device = device});
  const auto batch = models::PackedBatch::from_documents(docs_of({5, 17, 9, 30}, 11));
  auto [want, scale] = logits_on(*cpu, batch, c10::kCPU);
  auto [got, scale_dev] = logits_on(*dev, batch, device);
  const double bound = 2 * tol::forward_logits_budget(kLayers, kMaxReduction,
                                                      std::max(scale, scale_dev), tol::kUFp32);
  const double err = (got - want).abs().max().item<double>();
  record("model_parity_fp32", {{"device", device.str()},
                               {"max_abs_logit_diff", err},
                               {"bound", bound},
                               {"tokens", batch.num_tokens()}});
  EXPECT_LE(tol::noted("cuda_vs_cpu_fp32_logits", err, bound), bound);
  EXPECT_LT(bound, 1e-3) << "the bound must stay meaningful";
}

struct LogprobAgreement {
  double max_abs = 0, mean_abs = 0, abs_scale = 0;
  int64_t count = 0;
};

// The trainer's recomputation on `trainer` (full sequences, token_logprobs at the temperature)
// against the engine's reported log-probs.
LogprobAgreement compare_with_trainer(const models::CausalLM& trainer, c10::Device device,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const std::vector<engine::GenerateOutput>& outputs,
                                      double temperature) {
  c10::InferenceMode guard;
  std::vector<std::vector<int64_t>> docs;
  std::vector<int64_t> rows, targets;
  std::vector<float> engine_lp;
  int64_t offset = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto doc = prompts[i];
    const auto& out = outputs[i];
    doc.insert(doc.end(), out.output_ids.begin(), out.output_ids.end());
    for (size_t t = 0; t < out.output_ids.size(); ++t) {
      rows.push_back(offset + static_cast<int64_t>(prompts[i].size() + t) - 1);
      targets.push_back(out.output_ids[t]);
      engine_lp.push_back(out.output_logprobs[t]);
    }
    offset += static_cast<int64_t>(doc.size());
    docs.push_back(doc);
  }
  auto hidden_PD = trainer.forward_hidden(models::PackedBatch::from_documents(docs).to(device));
  const auto& w = trainer.weights();
  const auto& head_VD =
      trainer.head_weight(w[models::CausalLM::kEmbedUnit], w[trainer.final_unit()]);
  auto rows_T = at::tensor(rows, at::kLong).to(device);
  auto h_TD = hidden_PD.index_select(0, rows_T);
  models::LogProbOptions lo;
  lo.temperature = temperature;
  lo.with_entropy = false;
  auto lp_T = models::token_logprobs(h_TD, head_VD, at::tensor(targets, at::kLong).to(device), lo)
                  .logprobs_T.to(at::kCPU, at::kFloat);
  auto diff_T = (lp_T - at::tensor(engine_lp, at::kFloat)).abs();
  return {diff_T.max().item<double>(), diff_T.mean().item<double>(),
          tol::head_abs_scale(h_TD.cpu(), head_VD.cpu()), diff_T.numel()};
}

// bf16 on the device: with exact log-probs the engine reports the trainer's own computation, so
// |dlogp| = 0 exactly. Without, only decode steps differ from the trainer's prefill, by bf16
// roundings that land on the other side (tests/engine/engine_generate_test.cpp derives it):
// at most 4 u_bf16 abs_scale / T per token, and rare, so the mean stays below a tenth of that.
TEST(CudaEngineLogprobs, Bf16TrainerVsEngineWithAndWithoutExactLogprobs) {
  FURLONG_REQUIRE_TEST_DEVICE(device);
  const auto dir = cuda_testing::write_tiny_model("logprobs_bf16", 21, "bfloat16");
  auto trainer = models::load_hf_model(dir, {.dtype = at::kBFloat16, .device = device});
  const auto prompts = docs_of({5, 17, 2, 30, 9, 12}, 7);
  const double temperature = 0.8;
  for (bool exact : {true, false}) {
    SCOPED_TRACE(exact ? "exact log-probs" : "decode-time log-probs");
    engine::EngineOptions eo;
    eo.dtype = "bfloat16";
    eo.device = device.str();
    eo.exact_logprobs = exact;
    eo.max_total_tokens = 4096;
    auto eng = engine::Engine::load(dir.string(), eo);
    std::vector<engine::GenerateRequest> requests;
    for (size_t i = 0; i < prompts.size(); ++i) {
      engine::GenerateRequest r;
      r.input_ids = prompts[i];
      r.sampling.temperature = temperature;
      r.sampling.max_new_tokens = 16 + 3 * static_cast<int64_t>(i);
      r.sampling.ignore_eos = true;
      r.sampling.seed = 100 + i;
      requests.push_back(r);
    }
    auto outputs = eng->generate(requests);
    auto a = compare_with_trainer(*trainer, device, prompts, outputs, temperature);
    const double bound = 4 * tol::kUBf16 * a.abs_scale / temperature;
    record(exact ? "logprobs_bf16_exact" : "logprobs_bf16_decode",
           {{"device", device.str()},
            {"tokens", a.count},
            {"max_abs_dlogp", a.max_abs},
            {"mean_abs_dlogp", a.mean_abs},
            {"bound", exact ? 0.0 : bound}});
    if (exact) {
      EXPECT_EQ(a.max_abs, 0.0);
    } else {
      EXPECT_LE(tol::noted("cuda_engine_decode_vs_trainer_bf16", a.max_abs, bound), bound);
      EXPECT_LE(a.mean_abs, 0.1 * bound);
    }
  }
}

// ---- one single-rank FSDP step ----

struct StepResult {
  double loss = 0;
  std::vector<at::Tensor> grads, params;  // fp32 CPU copies, in FsdpModel::parameters() order
};

// One step of -mean(log p(next token)) over the packed documents with AdamW (lr 1e-3), fp32,
// on one rank whose FSDP groups are identities.
StepResult fsdp_step(const std::filesystem::path& dir, c10::Device device,
                     const std::vector<std::vector<int64_t>>& docs) {
  dist::InitOptions io;
  io.backend = dist::Backend::kGloo;  // one rank: every group is an identity, whatever the device
  auto groups = dist::ProcessGroups::init(dist::RendezvousInfo{}, io);
  auto mesh = dist::Mesh::build(*groups, 1);
  fsdp::FsdpOptions fo;
  fo.param_dtype = at::kFloat;
  fsdp::FsdpModel model(models::create_model(cuda_testing::tiny_config(), "tiny config"), *mesh, fo,
                        device);
  model.load_hf(io::HfWeights::open(dir));
  const auto batch = models::PackedBatch::from_documents(docs);
  std::vector<int64_t> rows;
  int64_t offset = 0;
  for (const auto& d : docs) {
    for (size_t i = 0; i + 1 < d.size(); ++i) rows.push_back(offset + static_cast<int64_t>(i));
    offset += static_cast<int64_t>(d.size());
  }
  auto rows_T = at::tensor(rows, at::kLong);
  auto targets_T = batch.tokens_P.index_select(0, rows_T + 1).to(device);
  auto out = model.forward(batch.to(device), {});
  auto lp = models::token_logprobs(out.hidden_PD.index_select(0, rows_T.to(device)), out.head_VD,
                                   targets_T, {.with_entropy = false});
  auto loss = -lp.logprobs_T.mean();
  loss.backward();
  model.end_step();
  StepResult r;
  r.loss = loss.item<double>();
  auto params = model.parameters();
  for (auto& p : params) r.grads.push_back(p.grad().to(at::kCPU, at::kFloat).clone());
  optim::AdamW opt(
      params, {.lr = 1e-3,
               .impl = device.is_cuda() ? optim::AdamWImpl::kFused : optim::AdamWImpl::kForLoop});
  opt.step();
  for (auto& p : params) r.params.push_back(p.detach().to(at::kCPU, at::kFloat).clone());
  return r;
}

// sum_t |d lp_t / d param| / T per element (float64, CPU, plain model): the absolute scale of
// each gradient element's per-token terms, which its rounding error is proportional to.
std::vector<at::Tensor> per_token_gradient_scale(const std::filesystem::path& dir,
                                                 const std::vector<std::vector<int64_t>>& docs) {
  auto model = models::load_hf_model(dir, {.dtype = at::kDouble, .device = c10::kCPU});
  model->set_requires_grad(true);
  std::vector<at::Tensor> leaves;
  for (auto& unit : model->weights())
    for (auto& w : unit) leaves.push_back(w);
  std::vector<at::Tensor> scale;
  for (auto& w : leaves) scale.push_back(at::zeros_like(w));
  models::ForwardOptions plain;
  plain.fused_kernels = false;  // the ATen op chain, which computes in float64
  int64_t count = 0;
  for (const auto& d : docs) count += static_cast<int64_t>(d.size()) - 1;
  for (const auto& d : docs) {
    auto hidden_PD = model->forward_hidden(models::PackedBatch::from_documents({d}), plain);
    const auto& w = model->weights();
    auto logits_PV =
        at::mm(hidden_PD, model->head_weight(w[0], w[model->final_unit()]).t()).log_softmax(-1);
    for (size_t i = 0; i + 1 < d.size(); ++i) {
      auto lp = logits_PV[static_cast<int64_t>(i)][d[i + 1]];
      auto g = torch::autograd::grad({lp}, leaves, {}, /*retain_graph=*/true);
      for (size_t k = 0; k < g.size(); ++k) scale[k] += g[k].abs() / static_cast<double>(count);
    }
  }
  return scale;
}

// The device's step against the CPU's. Gradients: each element is a sum over tokens of terms
// that pass through the forward and backward chains (2 x (9 L + 2) reductions of <= 128 terms)
// plus the token sum itself, so each side is within gamma_prob(2 (9 L + 2) 128 + T) of the exact
// value relative to sum_t |g_t| (per_token_gradient_scale), and they differ by twice that.
// Loss: a mean of log-probs, each within 2 x the logits' budget of the exact value per side.
// Parameters: AdamW's first step moves each by lr g / (|g| + eps); where |g| exceeds its bound
// b, the two updates differ by at most lr 2 b / (|g| - b), elsewhere by at most 2 lr.
TEST(CudaFsdp, SingleRankTrainStepMatchesTheCpuStep) {
  FURLONG_REQUIRE_TEST_DEVICE(device);
  const auto dir = cuda_testing::write_tiny_model("fsdp_fp32", 5, "float32");
  const auto docs = docs_of({12, 7, 20}, 3);
  auto want = fsdp_step(dir, c10::kCPU, docs);
  auto got = fsdp_step(dir, device, docs);
  auto scale = per_token_gradient_scale(dir, docs);
  ASSERT_EQ(got.grads.size(), scale.size());
  const double tokens = 36;  // 11 + 6 + 19 next-token rows
  const double g_rel =
      2 * tol::gamma_prob(2 * (9.0 * kLayers + 2) * kMaxReduction + tokens, tol::kUFp32);
  double worst_grad = 0, worst_param = 0;
  for (size_t k = 0; k < scale.size(); ++k) {
    auto b = (g_rel * scale[k]).to(at::kFloat) + 1e-30;
    auto g_excess = ((got.grads[k] - want.grads[k]).abs() - b).max().item<double>();
    worst_grad = std::max(worst_grad, g_excess);
    auto g = want.grads[k].abs();
    auto step_bound = at::where(g > 2 * b, 1e-3 * 2 * b / (g - b), at::full_like(g, 2e-3)) +
                      4 * tol::kUFp32 * want.params[k].abs();
    worst_param = std::max(
        worst_param, ((got.params[k] - want.params[k]).abs() - step_bound).max().item<double>());
  }
  auto cpu = models::load_hf_model(dir, {.dtype = at::kFloat, .device = c10::kCPU});
  const double logit_scale =
      logits_on(*cpu, models::PackedBatch::from_documents(docs), c10::kCPU).second;
  const double loss_bound =
      2 * 2 * tol::forward_logits_budget(kLayers, kMaxReduction, logit_scale, tol::kUFp32);
  record("fsdp_single_rank_step", {{"device", device.str()},
                                   {"loss_cpu", want.loss},
                                   {"loss_device", got.loss},
                                   {"grad_excess_over_bound", worst_grad},
                                   {"param_excess_over_bound", worst_param}});
  EXPECT_LE(worst_grad, 0.0) << "a gradient element is outside its rounding bound";
  EXPECT_LE(worst_param, 0.0) << "an updated parameter is outside its bound";
  EXPECT_NEAR(got.loss, want.loss, loss_bound);
}

}  // namespace
}  // namespace furlong
