// Unit tests of the engine's parts: sampling-params parsing, the tensor digest, the KV block
// allocator and the sampler's candidate sets.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "core/digest.h"
#include "engine/engine.h"
#include "engine/kv_budget.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/weight_sync.h"

namespace furlong::engine {
namespace {

using furlong::testing::error_of;

TEST(SamplingParams, ParsesSglangKeys) {
  auto p = parse_sampling_params(Json::parse(R"({"temperature": 0.5, "top_p": 0.9, "top_k": 5,
      "min_p": 0.1, "max_new_tokens": 7, "stop": "x", "stop_token_ids": [3], "ignore_eos": true,
      "sampling_seed": 9, "skip_special_tokens": false, "no_stop_trim": true})"),
                                 "req");
  EXPECT_EQ(p.temperature, 0.5);
  EXPECT_EQ(p.top_k, 5);
  EXPECT_EQ(p.max_new_tokens, 7);
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(p.stop_token_ids, std::vector<int64_t>{3});
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.seed, 9u);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_TRUE(p.no_stop_trim);
  EXPECT_EQ(parse_sampling_params(Json(), "req").temperature, 1.0);
}

TEST(SamplingParams, JsonParsesBackToTheSameSamplingInEveryField) {
  SamplingParams p;
  p.temperature = 0.7;
  p.top_p = 0.9;
  p.top_k = 20;
  p.min_p = 0.05;
  p.max_new_tokens = 33;
  p.ignore_eos = true;
  p.stop = {"\n\n", "END"};
  p.stop_token_ids = {7, 11};
  p.seed = 1234;
  p.frequency_penalty = 0.5;
  p.presence_penalty = -0.25;
  p.repetition_penalty = 1.25;
  p.min_new_tokens = 3;
  p.skip_special_tokens = false;
  p.no_stop_trim = true;
  auto back = parse_sampling_params(sampling_params_json(p), "test");
  EXPECT_EQ(back.temperature, p.temperature);
  EXPECT_EQ(back.top_p, p.top_p);
  EXPECT_EQ(back.top_k, p.top_k);
  EXPECT_EQ(back.min_p, p.min_p);
  EXPECT_EQ(back.max_new_tokens, p.max_new_tokens);
  EXPECT_EQ(back.ignore_eos, p.ignore_eos);
  EXPECT_EQ(back.stop, p.stop);
  EXPECT_EQ(back.stop_token_ids, p.stop_token_ids);
  EXPECT_EQ(back.seed, p.seed);
  EXPECT_EQ(back.frequency_penalty, p.frequency_penalty);
  EXPECT_EQ(back.presence_penalty, p.presence_penalty);
  EXPECT_EQ(back.repetition_penalty, p.repetition_penalty);
  EXPECT_EQ(back.min_new_tokens, p.min_new_tokens);
  EXPECT_EQ(back.skip_special_tokens, p.skip_special_tokens);
  EXPECT_EQ(back.no_stop_trim, p.no_stop_trim);
  // Without a seed, none is sent (the server then draws one).
  p.seed.reset();
  EXPECT_FALSE(sampling_params_json(p).contains("sampling_seed"));
}

TEST(WeightMetas, TheClientsBodyParsesBackOnTheServerSide) {
  std::vector<WeightMeta> metas = {{"model.embed_tokens.weight", "bfloat16", {32, 8}},
                                   {"model.norm.weight", "float32", {8}}};
  Json body{{"group_name", "g"}};
  add_weight_metas(metas, body);
  auto back = parse_weight_metas(body, "/update_weights_from_distributed");
  ASSERT_EQ(back.size(), 2u);
  for (size_t i = 0; i < metas.size(); ++i) {
    EXPECT_EQ(back[i].name, metas[i].name);
    EXPECT_EQ(back[i].dtype, metas[i].dtype);
    EXPECT_EQ(back[i].shape, metas[i].shape);
  }
  body["dtypes"][0] = "torch.bfloat16";  // SGLang clients send str(torch.bfloat16)
  EXPECT_EQ(parse_weight_metas(body, "w")[0].dtype, "bfloat16");
  body["shapes"][1] = Json::array({-1});
  EXPECT_NE(error_of([&] { parse_weight_metas(body, "w"); }).find("shapes[1] has a negative size"),
            std::string::npos);
  body["names"].push_back("extra");
  EXPECT_NE(error_of([&] { parse_weight_metas(body, "w"); }).find("must have the same length"),
            std::string::npos);
}

TEST(SamplingParams, RejectsBadInput) {
  auto msg = error_of([] { parse_sampling_params(Json::parse(R"({"temp": 1})"), "req 3"); });
  EXPECT_NE(msg.find("req 3"), std::string::npos);
  EXPECT_NE(msg.find("'temp'"), std::string::npos);
  msg = error_of([] { parse_sampling_params(Json::parse(R"({"top_p": 0})"), "r"); });
  EXPECT_NE(msg.find("top_p"), std::string::npos);
  msg = error_of([] { parse_sampling_params(Json::parse(R"({"max_new_tokens": "4"})"), "r"); });
  EXPECT_NE(msg.find("max_new_tokens"), std::string::npos);
  msg = error_of([] { parse_sampling_params(Json::parse(R"({"temperature": -1})"), "r"); });
  EXPECT_NE(msg.find("temperature"), std::string::npos);
}

TEST(Digest, DependsOnBitsNamesShapesAndDtypesNotOrder) {
  auto a = at::arange(12, at::kFloat).reshape({3, 4});
  auto b = at::ones({5}, at::kBFloat16);
  std::string d = tensors_digest({{"a", a}, {"b", b}});
  EXPECT_EQ(d.size(), 16u);
  EXPECT_EQ(d, tensors_digest({{"b", b.clone()}, {"a", a.clone()}}));
  auto flipped = a.clone();
  flipped.view(-1)[7] = std::nextafter(7.0f, 8.0f);
  EXPECT_NE(d, tensors_digest({{"a", flipped}, {"b", b}}));
  EXPECT_NE(d, tensors_digest({{"a", a.reshape({4, 3})}, {"b", b}}));
  EXPECT_NE(d, tensors_digest({{"a", a}, {"b", b.to(at::kHalf)}}));
  EXPECT_NE(d, tensors_digest({{"a", a}, {"c", b}}));
  EXPECT_EQ(d, tensors_digest({{"a", a.t().contiguous().t()}, {"b", b}}));
}

TEST(KvCache, AllocatesBlocksAndSlots) {
  KvCache cache(2, 4, 3, 1, 2, at::kFloat);
  auto blocks = cache.allocate(7);  // 3 blocks
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->size(), 3u);
  EXPECT_EQ(cache.num_free_blocks(), 1);
  EXPECT_FALSE(cache.allocate(4));
  auto slots = cache.slots_for(*blocks, 7);
  for (int64_t p = 0; p < 7; ++p) {
    EXPECT_EQ(slots[p].item<int64_t>(), (*blocks)[p / 3] * 3 + p % 3);
  }
  cache.free(*blocks);
  EXPECT_EQ(cache.num_free_blocks(), 4);
  cache.release();
  EXPECT_TRUE(cache.released());
  cache.rebuild();
  EXPECT_EQ(cache.k(1).size(0), 12);
}

TEST(EngineKvCache, SharedBlocksAreCountedOnceAndFreedByTheLastOwner) {
  KvCache cache(1, 6, 4, 1, 2, at::kFloat);
  auto leader = cache.allocate_tokens(10);  // 3 blocks
  ASSERT_TRUE(leader);
  std::vector<int64_t> shared(leader->begin(), leader->begin() + 2);
  cache.share(shared);  // a follower's reference to the two full prompt blocks
  auto own = cache.allocate_blocks(1);
  ASSERT_TRUE(own);
  EXPECT_EQ(cache.num_free_blocks(), 2);  // 3 + 1 taken, the shared two counted once
  EXPECT_EQ(cache.references(shared[0]), 2);
  cache.free(*leader);  // the leader ends first: the shared blocks stay with the follower
  EXPECT_EQ(cache.num_free_blocks(), 3);
  EXPECT_EQ(cache.references(shared[1]), 1);
  EXPECT_FALSE(cache.allocate_blocks(4));
  std::vector<int64_t> follower = shared;
  follower.push_back((*own)[0]);
  cache.free(follower);
  EXPECT_EQ(cache.num_free_blocks(), 6);
  for (int64_t b = 0; b < 6; ++b) EXPECT_EQ(cache.references(b), 0);
  cache.release();  // every block free again
}

TEST(EngineKvCache, CopySlotsIsBitExact) {
  KvCache cache(2, 2, 4, 1, 3, at::kFloat);
  auto values = at::randn({2, 1, 3});
  auto from = at::tensor({1, 2}, at::kLong), to = at::tensor({5, 6}, at::kLong);
  for (int64_t l = 0; l < 2; ++l) {
    cache.k(l).index_copy_(0, from, values * (l + 1));
    cache.v(l).index_copy_(0, from, values * (l + 3));
  }
  cache.copy_slots(from, to);
  for (int64_t l = 0; l < 2; ++l) {
    EXPECT_TRUE(at::equal(cache.k(l).index_select(0, to), values * (l + 1)));
    EXPECT_TRUE(at::equal(cache.v(l).index_select(0, to), values * (l + 3)));
  }
}

// Hybrid models: the DeltaNet layers get no K/V pools; copying slots skips them.
TEST(EngineKvCache, LayersWithoutKvHaveNoPools) {
  KvCache cache(4, 2, 4, 1, 3, at::kFloat, 0, {0, 1, 3});
  EXPECT_EQ(cache.first_kv_layer(), 2);
  for (int64_t l : {0, 1, 3}) {
    EXPECT_FALSE(cache.has_kv(l));
    EXPECT_FALSE(cache.k(l).defined());
    EXPECT_FALSE(cache.v(l).defined());
  }
  ASSERT_TRUE(cache.has_kv(2));
  auto values = at::randn({2, 1, 3});
  auto from = at::tensor({1, 2}, at::kLong), to = at::tensor({5, 6}, at::kLong);
  cache.k(2).index_copy_(0, from, values);
  cache.copy_slots(from, to);
  EXPECT_TRUE(at::equal(cache.k(2).index_select(0, to), values));
  cache.release();
  cache.rebuild();
  EXPECT_FALSE(cache.k(0).defined());
  EXPECT_EQ(cache.k(2).size(0), 8);
}

KvBudgetInput budget_input(int64_t total, int64_t available, int64_t weights) {
  KvBudgetInput in;
  in.memory = {total, available};
  in.weight_bytes = weights;
  in.mem_fraction_static = 0.5;
  in.bytes_per_token = 1000;
  in.block_size = 16;
  in.max_useful_tokens = int64_t{1} << 40;
  in.dtype = "float32";
  return in;
}

TEST(EngineKvBudget, AutomaticSizeStaysWithinTheFractionAndTheFreeMemory) {
  // 10 GB, all free, 1 GB of weights: min(5 - 1, 9 - 5) = 4 GB of cache.
  auto b = plan_kv_cache(budget_input(10'000'000'000, 9'000'000'000, 1'000'000'000));
  EXPECT_TRUE(b.automatic);
  EXPECT_LE(b.bytes, 4'000'000'000);
  EXPECT_GT(b.bytes, 4'000'000'000 - 16'000);  // within one block of the budget
  // Another process holds 3 GB: the free memory bounds it (6 - 5 = 1 GB).
  b = plan_kv_cache(budget_input(10'000'000'000, 6'000'000'000, 1'000'000'000));
  EXPECT_LE(b.bytes, 1'000'000'000);
  EXPECT_GT(b.bytes, 1'000'000'000 - 16'000);
  // Never more than the running requests could reserve.
  auto in = budget_input(10'000'000'000, 9'000'000'000, 1'000'000'000);
  in.max_useful_tokens = 100;
  EXPECT_EQ(plan_kv_cache(in).num_blocks, 7);
}

TEST(EngineKvBudget, TooLittleMemoryFailsNamingTheFlags) {
  auto msg = error_of([] { plan_kv_cache(budget_input(1'000'000'000, 900'000'000, 600'000'000)); });
  EXPECT_NE(msg.find("weights need 0.60 GB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--mem-fraction-static"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--dtype"), std::string::npos) << msg;
  // Fits, but the free memory leaves nothing for the cache (another process holds it).
  msg = error_of([] { plan_kv_cache(budget_input(10'000'000'000, 4'000'000'000, 1'000'000'000)); });
  EXPECT_NE(msg.find("no memory is left for the KV cache"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--max-total-tokens"), std::string::npos) << msg;
  // An explicit size larger than the free memory.
  auto in = budget_input(10'000'000'000, 9'000'000'000, 1'000'000'000);
  in.requested_tokens = 9'100'000;  // 9.1 GB
  msg = error_of([&] { plan_kv_cache(in); });
  EXPECT_NE(msg.find("--max-total-tokens 9100000 needs a KV cache of 9.10 GB"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("only 9.00 GB is available"), std::string::npos) << msg;
  in.requested_tokens = 8'000'000;  // honoured even above the fraction's 4 GB
  EXPECT_EQ(plan_kv_cache(in).num_blocks, 500'000);
}

// What the running sequences hold beside the blocks (DeltaNet states) comes off the cache, in
// both sizing modes, and a reservation that leaves nothing names --max-running-requests.
TEST(EngineKvBudget, ReservedBytesComeOffTheCache) {
  auto in = budget_input(10'000'000'000, 9'000'000'000, 1'000'000'000);
  in.reserved_bytes = 1'500'000'000;
  auto b = plan_kv_cache(in);  // min(5 - 1, 9 - 5) - 1.5 = 2.5 GB
  EXPECT_LE(b.bytes, 2'500'000'000);
  EXPECT_GT(b.bytes, 2'500'000'000 - 16'000);
  in.requested_tokens = 8'000'000;  // 8 GB of 9 GB free, with 1.5 GB reserved: no longer fits
  auto msg = error_of([&] { plan_kv_cache(in); });
  EXPECT_NE(msg.find("only 7.50 GB is available"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1.50 GB go to the DeltaNet states"), std::string::npos) << msg;
  in.requested_tokens = 0;
  in.reserved_bytes = 4'000'000'000;
  msg = error_of([&] { plan_kv_cache(in); });
  EXPECT_NE(msg.find("--max-running-requests"), std::string::npos) << msg;
}

TEST(Sampler, CandidatesApplyTopKTopPMinP) {
  auto logits = at::log(at::tensor({0.1, 0.4, 0.2, 0.3}, at::kDouble)).to(at::kFloat);
  SamplingParams p;
  auto all = sampling_candidates(logits, p);
  EXPECT_EQ(all.ids.size(), 4u);
  p.top_k = 2;
  auto k2 = sampling_candidates(logits, p);
  EXPECT_EQ(k2.ids, (std::vector<int64_t>{1, 3}));
  EXPECT_NEAR(k2.probs[0], 4.0 / 7.0, 1e-6);
  p.top_k = -1;
  p.top_p = 0.65;  // 0.4 + 0.3 reaches it
  EXPECT_EQ(sampling_candidates(logits, p).ids, (std::vector<int64_t>{1, 3}));
  p.top_p = 1.0;
  p.min_p = 0.6;  // keeps p >= 0.24
  EXPECT_EQ(sampling_candidates(logits, p).ids, (std::vector<int64_t>{1, 3}));
  p.min_p = 0;
  p.temperature = 0;
  std::mt19937_64 rng(1);
  EXPECT_EQ(sample_token(logits, p, rng), 1);
}

}  // namespace
}  // namespace furlong::engine
