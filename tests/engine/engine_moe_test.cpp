// The engine on mixture-of-experts models (Qwen3-MoE, Qwen3.5-MoE) and rollout routing replay:
// greedy generation equals transformers' generate token for token, and the routing the engine
// records (EngineOptions::record_routed_experts) for every prompt and generated token equals
// the routing transformers computes over the full sequence, also with prefix sharing, chunked
// prefill and over HTTP (SGLang's base64 meta_info.routed_experts).
//
// Tolerances (tests/common/tolerances.h; tests/models/model_parity_test.cpp derives the MoE
// budget): a sparse block adds to the 9 reductions of a dense one the router GEMM, the router
// softmax sum, the top-k renormalization and the weighted combine of the K expert outputs, 13
// per layer, of at most k_max = 96 terms (the o_proj over 4 heads x 24), plus the final norm
// and the head. fp32 log-probs: each implementation within gamma_prob(reductions * k_max) of
// the exact logits' absolute scale, lp = z_y - logsumexp(z) moves by at most 2 max|dz|, so
// 2 * 2 * budget plus both log_softmax roundings.
// Routing is discrete: the two implementations choose the same experts wherever the margin
// p_(K) - p_(K+1) of transformers' choice exceeds what rounding can move: the router logits of
// the two differ by at most dz = 2 gamma_prob(13 L k_max) router_abs_scale (the router's
// input passes through the same reductions as the logits do), and softmax probabilities by at
// most 2 dz each, so a choice can only differ where the margin is below 4 dz. The tests assert
// first that no compared token is that close (the seeds have no near-tie), then exact equality.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <thread>

#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "data/prompt_dataset.h"
#include "data/sample_builder.h"
#include "dist/launcher.h"
#include "dist/process_group.h"
#include "engine/routed_experts_codec.h"
#include "engine/server/backend.h"
#include "engine/server/client.h"
#include "engine/server/server.h"
#include "engine_test_util.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
#include "rl/sample.h"
#include "rollout/rollout_collector.h"
#include "rollout/rollout_engines.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;
using namespace furlong::engine::testing;
namespace tol = furlong::testing::tol;

constexpr int64_t kExperts = 8, kTopK = 2, kMaxNew = 16;
constexpr double kKMax = 96;

Json moe_config(bool norm_topk, int64_t sparse_step, std::vector<int64_t> mlp_only,
                int64_t layers) {
  return furlong::testing::as_qwen3_moe(tiny_config("qwen3"), {{"num_hidden_layers", layers},
                                                               {"num_experts", kExperts},
                                                               {"num_experts_per_tok", kTopK},
                                                               {"norm_topk_prob", norm_topk},
                                                               {"decoder_sparse_step", sparse_step},
                                                               {"mlp_only_layers", mlp_only}});
}

struct MoeCase {
  std::string name;
  Json config;
  int seed;
  std::string attn;
  // The fp32 budget's reductions per layer and their longest length (header comment).
  double reductions_per_layer = 13;
  double k_max = kKMax;
};

const std::vector<MoeCase>& moe_cases() {
  static const std::vector<MoeCase> cases = {
      {"moe_norm_topk", moe_config(true, 1, {1}, 3), 31, "sdpa"},
      {"moe_step2", moe_config(false, 2, {}, 4), 32, "eager"},
      // Qwen3.5-MoE: DeltaNet and gated attention layers, each with routed and shared experts;
      // 23 reductions per layer (tests/models/qwen3_5_test.cpp), the longest of 64 terms (o_proj
      // over 4 heads x 16, and the DeltaNet's 64-token chunk).
      {"qwen3_5_moe", furlong::testing::tiny_qwen3_5_moe_config({{"max_position_embeddings", 256}}),
       33, "eager", 23, 64}};
  return cases;
}

const std::vector<std::vector<int64_t>>& moe_prompts() {
  static const auto prompts = random_prompts({3, 11, 25, 7, 1, 30}, 97, 99);
  return prompts;
}

// transformers' models, greedy outputs and full-sequence routing (scripts/oracles/hf_generate.py).
const fs::path& oracle_dir() {
  static const fs::path dir = [] {
    Json plan = Json::array();
    for (const auto& c : moe_cases()) {
      plan.push_back({{"name", c.name},
                      {"config", c.config},
                      {"seed", c.seed},
                      {"dtype", "float32"},
                      {"attn", c.attn},
                      {"tokenizer_dir", furlong::testing::tokenizer_dir("qwen3").string()},
                      {"prompts", moe_prompts()},
                      {"max_new_tokens", kMaxNew}});
    }
    return furlong::testing::cached_oracle(
        "engine_moe", "oracles/hf_generate.py", plan.dump(), [&](const fs::path& d) {
          write_file_atomic(d / "plan.json", plan.dump());
          return std::vector<std::string>{(d / "plan.json").string(), d.string()};
        });
  }();
  return dir;
}

std::string model_dir(const MoeCase& c) {
  return (oracle_dir() / c.name / "model").string();
}

EngineOptions recording_options() {
  auto o = small_engine_options();
  o.record_routed_experts = true;
  return o;
}

std::vector<GenerateRequest> routed_requests(const std::vector<std::vector<int64_t>>& prompts) {
  auto requests = greedy_requests(prompts, kMaxNew);
  for (auto& r : requests) r.return_routed_experts = true;
  return requests;
}

// Expert choices of the compared rows (tokens t < T - 1, sparse layers) against transformers':
// `decisive` rows have a margin above 4 dz (they cannot differ by rounding), the others are
// near-ties, where either choice is right. Also checks the shape, the dense columns and the
// last row (-1).
struct RoutingAgreement {
  int64_t decisive = 0, decisive_mismatches = 0, near_ties = 0, near_tie_mismatches = 0;
  RoutingAgreement& operator+=(const RoutingAgreement& o) {
    decisive += o.decisive;
    decisive_mismatches += o.decisive_mismatches;
    near_ties += o.near_ties;
    near_tie_mismatches += o.near_tie_mismatches;
    return *this;
  }
};

RoutingAgreement compare_routing(const MoeCase& c, const Json& oracle, size_t prompt,
                                 const GenerateOutput& out, const models::ModelConfig& cfg) {
  const auto& ref = oracle["routing"][prompt];
  const auto& gap = oracle["routing_gap"][prompt];
  const auto& r = out.routed_experts;
  const int64_t L = cfg.num_hidden_layers, K = cfg.moe.experts_per_token;
  const auto T = static_cast<int64_t>(ref.size());
  RoutingAgreement a;
  EXPECT_EQ(T, static_cast<int64_t>(moe_prompts()[prompt].size() + out.output_ids.size()));
  EXPECT_EQ(r.num_layers, L);
  EXPECT_EQ(r.top_k, K);
  EXPECT_EQ(r.num_tokens(), T) << "prompt " << prompt;
  if (r.num_tokens() != T) {
    a.decisive_mismatches = T;
    return a;
  }
  const double dz =
      2 * tol::gamma_prob(c.reductions_per_layer * static_cast<double>(L) * c.k_max, tol::kUFp32) *
      oracle["router_abs_scale"].get<double>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t l = 0; l < L; ++l) {
      const auto* row = r.ids.data() + (t * L + l) * K;
      if (t == T - 1 || !cfg.moe.is_sparse_layer(l)) {
        EXPECT_TRUE(std::all_of(row, row + K, [](int32_t e) { return e == -1; }))
            << "token " << t << " layer " << l << " (never ran, or a dense layer)";
        continue;
      }
      bool same = true;
      for (int64_t k = 0; k < K; ++k) same = same && row[k] == ref[t][l][k].get<int32_t>();
      if (gap[t][l].get<double>() > 4 * dz) {
        ++a.decisive;
        a.decisive_mismatches += same ? 0 : 1;
      } else {
        ++a.near_ties;
        a.near_tie_mismatches += same ? 0 : 1;
      }
    }
  }
  return a;
}

// 2 x (2 x budget) + 2 x softmax rounding, with the case's budget (the scale and rounding of
// the trainer's scoring, engine_test_util.h).
double moe_logprob_tol(const MoeCase& c, const models::CausalLM& model,
                       const std::vector<std::vector<int64_t>>& prompts,
                       const std::vector<GenerateOutput>& outputs) {
  const auto a = compare_with_trainer(model, prompts, outputs, 1.0);
  const double reductions = c.reductions_per_layer * static_cast<double>(model.num_layers()) + 2;
  const double budget = tol::gamma_prob(reductions * c.k_max, tol::kUFp32) * a.abs_scale;
  return 2 * 2 * budget + 2 * a.lp_rounding;
}

// Greedy outputs equal transformers', log-probs within the bound, routing equal to
// transformers' routing of the full sequence.
void expect_matches_oracle(const MoeCase& c, const Engine& engine,
                           const std::vector<GenerateOutput>& outputs, size_t copies = 1) {
  Json oracle = read_json_file(oracle_dir() / c.name / "outputs.json");
  const auto& prompts = moe_prompts();
  ASSERT_EQ(outputs.size(), prompts.size() * copies);
  double max_lp_diff = 0;
  RoutingAgreement agreement;
  for (size_t j = 0; j < outputs.size(); ++j) {
    const size_t i = j / copies;
    EXPECT_EQ(outputs[j].output_ids, oracle["outputs"][i].get<std::vector<int64_t>>())
        << "prompt " << i;
    auto lps = oracle["logprobs"][i].get<std::vector<double>>();
    for (size_t t = 0; t < lps.size() && t < outputs[j].output_logprobs.size(); ++t) {
      max_lp_diff = std::max(max_lp_diff, std::abs(outputs[j].output_logprobs[t] - lps[t]));
    }
    agreement += compare_routing(c, oracle, i, outputs[j], engine.model().config());
  }
  std::vector<std::vector<int64_t>> expanded;
  for (size_t j = 0; j < outputs.size(); ++j) expanded.push_back(prompts[j / copies]);
  const double lp_tol = moe_logprob_tol(c, engine.model(), expanded, outputs);
  EXPECT_LT(lp_tol, 2e-3) << "the bound must stay meaningful";
  EXPECT_LE(tol::noted("engine_moe_vs_hf_logprob", max_lp_diff, lp_tol), lp_tol);
  EXPECT_EQ(agreement.decisive_mismatches, 0) << "of " << agreement.decisive << " choices";
  // Meaningful only if most choices are decisive (a wrong row or layer would then show): at
  // least 3 in 4 (the tiny Qwen3.5-MoE's bound, with 23 reductions per layer, leaves 1 in 5).
  EXPECT_GT(agreement.decisive, 3 * agreement.near_ties);
  std::cout << c.name << ": max |logprob - transformers| = " << max_lp_diff << " (bound " << lp_tol
            << "); routing: " << agreement.decisive_mismatches << " of " << agreement.decisive
            << " decisive (token, layer) choices differ, " << agreement.near_tie_mismatches
            << " of " << agreement.near_ties << " near-ties\n";
}

TEST(EngineMoe, GreedyAndRoutingMatchTransformers) {
  for (const auto& c : moe_cases()) {
    SCOPED_TRACE(c.name);
    auto options = recording_options();
    options.attn_implementation = c.attn;
    auto engine = Engine::load(model_dir(c), options);
    expect_matches_oracle(c, *engine, engine->generate(routed_requests(moe_prompts())));
  }
}

// Long prompts prefilled in chunks of 4 tokens (one per step, beside the decodes of the
// others): every chunk's routing lands in its slots (and, for Qwen3.5-MoE, every chunk starts
// from the DeltaNet state the previous one left).
TEST(EngineMoe, ChunkedPrefillRecordsTheSameRouting) {
  for (size_t i : {0, 2}) {
    const auto& c = moe_cases()[i];
    SCOPED_TRACE(c.name);
    auto options = recording_options();
    options.chunked_prefill_size = 4;
    options.max_prefill_tokens = 6;
    options.attn_implementation = c.attn;
    auto engine = Engine::load(model_dir(c), options);
    expect_matches_oracle(c, *engine, engine->generate(routed_requests(moe_prompts())));
  }
}

// n samples of one prompt share the leader's prompt blocks (prefix sharing): the followers'
// prompt rows are the routing the leader recorded when it filled those slots (and the copied
// partial last block), equal to an unshared run's and to transformers'.
TEST(EngineMoe, PrefixSharingCarriesTheLeadersRouting) {
  const auto& c = moe_cases()[0];
  constexpr size_t kCopies = 3;
  std::vector<std::vector<int64_t>> prompts;
  for (const auto& p : moe_prompts()) {
    for (size_t j = 0; j < kCopies; ++j) prompts.push_back(p);
  }
  auto options = recording_options();
  auto engine = Engine::load(model_dir(c), options);
  expect_matches_oracle(c, *engine, engine->generate(routed_requests(prompts)), kCopies);
  EXPECT_GT(engine->model_info()["prefix_shared_tokens"].get<int64_t>(), 0);

  // Sampled (different tokens per sample): shared and unshared runs agree token for token and
  // in every routed expert.
  auto sampled = routed_requests(prompts);
  for (size_t j = 0; j < sampled.size(); ++j) {
    sampled[j].sampling.temperature = 1.0;
    sampled[j].sampling.seed = 1000 + j;
  }
  auto shared = engine->generate(sampled);
  options.prefix_sharing = false;
  auto unshared = Engine::load(model_dir(c), options)->generate(sampled);
  for (size_t j = 0; j < sampled.size(); ++j) {
    EXPECT_EQ(shared[j].output_ids, unshared[j].output_ids) << "sample " << j;
    EXPECT_EQ(shared[j].routed_experts.ids, unshared[j].routed_experts.ids) << "sample " << j;
    // The prompt rows are those of the group's first sample.
    const auto lead = shared[j / kCopies * kCopies].routed_experts.ids;
    const size_t prompt_ids = prompts[j].size() * c.config["num_hidden_layers"].get<size_t>() *
                              static_cast<size_t>(kTopK);
    EXPECT_TRUE(
        std::equal(lead.begin(), lead.begin() + prompt_ids, shared[j].routed_experts.ids.begin()))
        << "sample " << j;
  }
}

// bf16 engine (the in-place decode attention kernel, bf16 experts through inference_linear):
// the record is well formed (distinct valid ids in sparse layers, -1 elsewhere); with bf16's
// router error (~0.1 in probability) near-ties are common, so ids are not compared with fp32.
TEST(EngineMoe, Bf16RecordIsWellFormed) {
  const auto& c = moe_cases()[0];
  auto options = recording_options();
  options.dtype = "bfloat16";
  auto engine = Engine::load(model_dir(c), options);
  auto outputs = engine->generate(routed_requests(moe_prompts()));
  const auto& cfg = engine->model().config();
  const int64_t L = cfg.num_hidden_layers;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& r = outputs[i].routed_experts;
    const int64_t T = static_cast<int64_t>(moe_prompts()[i].size() + outputs[i].output_ids.size());
    ASSERT_EQ(r.num_tokens(), T);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t l = 0; l < L; ++l) {
        const auto* row = r.ids.data() + (t * L + l) * kTopK;
        if (t == T - 1 || !cfg.moe.is_sparse_layer(l)) {
          EXPECT_TRUE(std::all_of(row, row + kTopK, [](int32_t e) { return e == -1; }));
          continue;
        }
        std::set<int32_t> distinct(row, row + kTopK);
        EXPECT_EQ(distinct.size(), static_cast<size_t>(kTopK)) << "token " << t << " layer " << l;
        EXPECT_TRUE(*distinct.begin() >= 0 && *distinct.rbegin() < kExperts);
      }
    }
  }
}

// The routing pool costs L * K * 4 bytes per KV slot, counted in the cache's size.
TEST(EngineMoe, RoutingPoolIsCountedInTheCacheSize) {
  const auto& c = moe_cases()[0];
  auto options = small_engine_options();
  auto plain = Engine::load(model_dir(c), options)->model_info();
  options.record_routed_experts = true;
  auto recording = Engine::load(model_dir(c), options)->model_info();
  const int64_t slots = plain["max_total_tokens"].get<int64_t>();
  EXPECT_EQ(recording["max_total_tokens"].get<int64_t>(), slots);
  EXPECT_EQ(recording["kv_cache_bytes"].get<int64_t>() - plain["kv_cache_bytes"].get<int64_t>(),
            slots * c.config["num_hidden_layers"].get<int64_t>() * kTopK * 4);
  EXPECT_TRUE(recording["record_routed_experts"].get<bool>());
}

// The colocated hand-off drops and rebuilds the routing pool with the K/V pools.
TEST(EngineMoe, ReleaseAndResumeKeepRecording) {
  const auto& c = moe_cases()[0];
  auto engine = Engine::load(model_dir(c), recording_options());
  const auto before = engine->generate(routed_requests(moe_prompts()));
  engine->release_memory(/*include_weights=*/false);
  engine->resume_memory();
  const auto after = engine->generate(routed_requests(moe_prompts()));
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].output_ids, before[i].output_ids);
    EXPECT_EQ(after[i].routed_experts.ids, before[i].routed_experts.ids) << "prompt " << i;
  }
}

TEST(EngineMoe, AskingForRoutingWithoutARecordFailsClearly) {
  const auto& c = moe_cases()[0];
  auto engine = Engine::load(model_dir(c), small_engine_options());
  auto requests = routed_requests({{1, 2, 3}});
  auto why = furlong::testing::error_of([&] { engine->submit(requests[0], {}); });
  EXPECT_NE(why.find("record_routed_experts"), std::string::npos) << why;
  EXPECT_NE(why.find("--enable-return-routed-experts"), std::string::npos) << why;

  auto dense = furlong::testing::scratch_dir() / "dense";
  write_tiny_model(dense, tiny_config("qwen3"), 5, "float32");
  auto dense_engine = Engine::load(dense.string(), small_engine_options());
  why = furlong::testing::error_of([&] { dense_engine->submit(requests[0], {}); });
  EXPECT_NE(why.find("has none"), std::string::npos) << why;
  why = furlong::testing::error_of([&] { Engine::load(dense.string(), recording_options()); });
  EXPECT_NE(why.find("mixture-of-experts"), std::string::npos) << why;
}

TEST(RoutedExpertsCodec, RoundTripsAndRejectsBadInput) {
  for (size_t n = 0; n < 7; ++n) {  // every padding case
    std::vector<uint8_t> bytes(n);
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(37 * i + 250);
    EXPECT_EQ(base64_decode(base64_encode(bytes.data(), n), "t"), bytes);
  }
  EXPECT_EQ(base64_encode("Man", 3), "TWFu");
  EXPECT_EQ(base64_encode("Ma", 2), "TWE=");
  RoutedExperts r{2, 2, {1, 2, 3, 4, 5, 6, 7, 0, -1, -1, -1, -1}};  // 3 tokens
  auto back = routed_experts_from_sglang(routed_experts_to_sglang(r), 3, 2, 2, "t");
  EXPECT_EQ(back.ids, r.ids);
  auto why = furlong::testing::error_of(
      [&] { routed_experts_from_sglang(routed_experts_to_sglang(r), 4, 2, 2, "response"); });
  EXPECT_NE(why.find("expected int32 [3 tokens, 2 layers, 2 experts]"), std::string::npos) << why;
  furlong::testing::error_of([] { base64_decode("TW*u", "t"); });
  furlong::testing::error_of([] { base64_decode("TWF", "t"); });
}

// SGLang's /generate: return_routed_experts gives meta_info.routed_experts, base64 of int32
// [prompt + output - 1, L, K], equal to the engine's own record; the client decodes it.
TEST(EngineMoe, GenerateOverHttpReturnsSglangsRoutedExperts) {
  const auto& c = moe_cases()[0];
  std::shared_ptr<Engine> engine = Engine::load(model_dir(c), recording_options());
  const auto direct = engine->generate(routed_requests(moe_prompts()));
  server::ServerOptions so;
  so.port = 0;
  server::EngineServer http(server::make_engine_backend(engine, model_dir(c)), so);
  http.start();
  server::EngineClient client(http.url());
  const int64_t L = c.config["num_hidden_layers"].get<int64_t>();
  Json greedy = {{"max_new_tokens", kMaxNew}, {"temperature", 0.0}, {"ignore_eos", true}};
  for (size_t i = 0; i < moe_prompts().size(); ++i) {
    const auto& prompt = moe_prompts()[i];
    auto result = client.generate(prompt, greedy, true, "", /*return_routed_experts=*/true);
    ASSERT_EQ(result.output_ids, direct[i].output_ids);
    const auto T = static_cast<int64_t>(prompt.size() + result.output_ids.size());
    const auto bytes = base64_decode(result.routed_experts_base64, "test");
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), (T - 1) * L * kTopK * 4);  // SGLang's shape
    auto decoded =
        routed_experts_from_sglang(result.routed_experts_base64, T, L, kTopK, "/generate");
    EXPECT_EQ(decoded.ids, direct[i].routed_experts.ids) << "prompt " << i;
  }
  // n > 1 (prefix sharing inside one call), and a plain request carries no field.
  Json body = {{"input_ids", moe_prompts()[2]},
               {"sampling_params", Json{{"max_new_tokens", kMaxNew}, {"n", 2}}},
               {"return_routed_experts", true}};
  for (const auto& item : client.generate(body)) {
    const auto n_out = item["output_ids"].size();
    const auto T = static_cast<int64_t>(moe_prompts()[2].size() + n_out);
    auto r = routed_experts_from_sglang(item["meta_info"]["routed_experts"].get<std::string>(), T,
                                        L, kTopK, "/generate n=2");
    EXPECT_TRUE(std::equal(r.ids.begin(), r.ids.begin() + 25 * L * kTopK,
                           direct[2].routed_experts.ids.begin()));
  }
  // Streamed: only the final event carries the field.
  int64_t partial_with_field = 0;
  Json last = client.generate_stream(Json{{"input_ids", moe_prompts()[1]},
                                          {"sampling_params", greedy},
                                          {"return_routed_experts", true}},
                                     [&](const Json& event) {
                                       if (event["meta_info"]["finish_reason"].is_null())
                                         partial_with_field +=
                                             event["meta_info"].contains("routed_experts") ? 1 : 0;
                                     });
  EXPECT_EQ(partial_with_field, 0);
  const auto T1 = static_cast<int64_t>(moe_prompts()[1].size() + kMaxNew);
  EXPECT_EQ(routed_experts_from_sglang(last["meta_info"]["routed_experts"].get<std::string>(), T1,
                                       L, kTopK, "stream")
                .ids,
            direct[1].routed_experts.ids);
  auto plain = client.generate(moe_prompts()[0], greedy, true);
  EXPECT_TRUE(plain.routed_experts_base64.empty());
  EXPECT_FALSE(plain.raw["meta_info"].contains("routed_experts"));
  http.stop();

  // An engine started without the record answers 400 naming the server flag.
  std::shared_ptr<Engine> bare = Engine::load(model_dir(c), small_engine_options());
  server::EngineServer bare_http(server::make_engine_backend(bare, model_dir(c)), so);
  bare_http.start();
  auto raw = server::EngineClient(bare_http.url())
                 .request("POST", "/generate",
                          Json{{"input_ids", {1, 2, 3}}, {"return_routed_experts", true}}.dump());
  EXPECT_EQ(raw.status, 400);
  EXPECT_NE(raw.body.find("--enable-return-routed-experts"), std::string::npos) << raw.body;
  bare_http.stop();
}

// ---- rollout collection (--use-rollout-routing-replay) ----

// A greedy rollout of every oracle prompt x 2 samples through `engines`: each sample carries
// the engine's routing of prompt + response (rows = tokens), equal to transformers'.
rollout::RolloutConfig rollout_options(const MoeCase& c) {
  rollout::RolloutConfig o;
  o.engine.hf_checkpoint = model_dir(c);
  o.engine.record_routing = true;
  o.engine.compute_dtype = ComputeDtype::kFloat32;  // the colocated engines' dtype
  o.data.rollout_batch_size = static_cast<int64_t>(moe_prompts().size());
  o.data.n_samples_per_prompt = 2;
  o.rollout.rollout_temperature = 0.0;
  o.rollout.rollout_max_response_len = kMaxNew;
  o.rollout.engine_max_total_tokens = 4096;
  return o;
}

std::vector<rl::Sample> collect_rollout(const rollout::RolloutConfig& o,
                                        rollout::RolloutEngines& engines) {
  std::vector<data::Prompt> prompts;
  for (size_t i = 0; i < moe_prompts().size(); ++i) {
    data::Prompt p;
    p.where = "test:" + std::to_string(i);
    p.ids = moe_prompts()[i];
    prompts.push_back(p);
  }
  data::PromptDataset dataset(prompts, /*shuffle=*/false, 1);
  data::RolloutDataSource source(dataset, o.data.n_samples_per_prompt);
  const auto tok = tokenizer::Tokenizer::from_directory(o.engine.hf_checkpoint);
  rollout::RolloutCollector collector(o, engines, source, tok, [](std::vector<rl::Sample*>& s) {
    for (auto* sample : s) sample->raw_reward = 0;
  });
  return collector.collect().samples;
}

void expect_rollout_routing(const MoeCase& c, const std::vector<rl::Sample>& samples) {
  Json oracle = read_json_file(oracle_dir() / c.name / "outputs.json");
  auto engine = Engine::load(model_dir(c), small_engine_options());  // for the config
  ASSERT_EQ(samples.size(), moe_prompts().size() * 2);
  RoutingAgreement agreement;
  for (const auto& s : samples) {
    rl::validate_sample(s, "sample " + std::to_string(s.index));
    const auto i = static_cast<size_t>(s.group_index);
    ASSERT_EQ(s.routed_experts.num_tokens(), static_cast<int64_t>(s.tokens.size()));
    GenerateOutput out;  // the sample's response and routing as compare_routing reads them
    out.output_ids.assign(s.tokens.begin() + s.prompt_length(), s.tokens.end());
    EXPECT_EQ(out.output_ids, oracle["outputs"][i].get<std::vector<int64_t>>());
    out.routed_experts = s.routed_experts;
    agreement += compare_routing(c, oracle, i, out, engine->model().config());
  }
  EXPECT_EQ(agreement.decisive_mismatches, 0) << "of " << agreement.decisive << " choices";
  EXPECT_GT(agreement.decisive, 9 * agreement.near_ties);
}

// Engine servers (here one in process): the remote client asks /generate for
// return_routed_experts and decodes SGLang's base64 [len-1, L, K], adding the -1 row.
TEST(MoeRollout, RemoteEnginesFillTheSamplesRoutedExperts) {
  const auto& c = moe_cases()[0];
  std::shared_ptr<Engine> engine = Engine::load(model_dir(c), recording_options());
  server::ServerOptions so;
  so.port = 0;
  server::EngineServer http(server::make_engine_backend(engine, model_dir(c)), so);
  http.start();
  auto o = rollout_options(c);
  o.rollout.rollout_engine_urls = {http.url()};
  auto engines = rollout::make_remote_engines(o, 0);
  expect_rollout_routing(c, collect_rollout(o, *engines));
  engines.reset();
  http.stop();
}

// Colocated engines on two ranks (threads of this process): rank 1's engine serves half the
// groups, and its outputs' routing travels to rank 0 in the gathered JSON.
TEST(MoeRollout, ColocatedEnginesCarryRoutedExpertsAcrossRanks) {
  const auto& c = moe_cases()[0];
  auto o = rollout_options(c);
  o.rollout.colocate = true;
  o.rollout.rollout_num_gpus_per_engine = 1;
  dist::RendezvousInfo info;
  info.world_size = info.local_world_size = 2;
  info.master_port = dist::pick_free_port("127.0.0.1");
  std::vector<rl::Sample> samples;
  int64_t engines_seen = 0;
  auto rank_main = [&](int rank) {
    auto mine = info;
    mine.rank = mine.local_rank = rank;
    dist::InitOptions init;
    init.backend = dist::Backend::kGloo;
    auto groups = dist::ProcessGroups::init(mine, init);
    auto engines = rollout::make_colocated_engines(o, *groups);
    engines->generation_phase(rank == 0, [&] {
      engines_seen = engines->num_engines();
      samples = collect_rollout(o, *engines);
    });
  };
  std::thread peer(rank_main, 1);
  rank_main(0);
  peer.join();
  EXPECT_EQ(engines_seen, 2);
  expect_rollout_routing(c, samples);
}

}  // namespace
}  // namespace furlong::engine
