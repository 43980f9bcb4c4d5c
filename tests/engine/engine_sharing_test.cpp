// The KV cache's capacity and how it is shared: prefix sharing between the samples of one
// prompt (bit-identical to unshared runs, aborts of a leader, accounting), chunked prefill of
// long prompts (equal to one-shot prefill) and the cache sized from the machine's memory.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "common/test_util.h"
#include "engine/kv_cache.h"
#include "engine_test_util.h"
#include "models/causal_lm.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;
using namespace furlong::engine::testing;

class EngineKvSharing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(furlong::testing::scratch_dir() / "model");
    write_tiny_model(*dir_, tiny_config("qwen3"), 57, "float32");
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path* dir_;
};
fs::path* EngineKvSharing::dir_ = nullptr;

// n sampled requests of each prompt (distinct seeds), prompt-major.
std::vector<GenerateRequest> grpo_requests(const std::vector<std::vector<int64_t>>& prompts, int n,
                                           int64_t max_new) {
  std::vector<GenerateRequest> requests;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int j = 0; j < n; ++j) {
      GenerateRequest r;
      r.input_ids = prompts[p];
      r.sampling.temperature = 1.0;
      r.sampling.top_p = 0.95;
      r.sampling.max_new_tokens = max_new;
      r.sampling.ignore_eos = true;
      r.sampling.seed = 1000 * p + j;
      requests.push_back(r);
    }
  }
  return requests;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Equal tokens; decode-time log-probs within `tol`. Across two runs they are not bit-equal
// even without sharing: the engine's GEMMs (MKL, the skinny decode kernel) round a row
// differently with the number of rows in the pass, and a shared prefill has fewer rows. fp32
// over 2 layers: a few ulps of the logits, measured max |delta| ~5e-7; 1e-5 bounds it.
void expect_same_tokens(const std::vector<GenerateOutput>& a, const std::vector<GenerateOutput>& b,
                        double tol = 1e-5) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].output_ids, b[i].output_ids) << "request " << i;
    ASSERT_EQ(a[i].output_logprobs.size(), b[i].output_logprobs.size());
    for (size_t t = 0; t < a[i].output_logprobs.size(); ++t) {
      EXPECT_NEAR(a[i].output_logprobs[t], b[i].output_logprobs[t], tol) << i << ":" << t;
    }
  }
}

EngineOptions sharing(bool on, int64_t max_prefill_tokens = 8192) {
  auto o = small_engine_options();
  o.prefix_sharing = on;
  o.max_prefill_tokens = max_prefill_tokens;
  return o;
}

// Prompts of 9 (a partial last block of 4-token blocks), 8 (whole blocks) and 3 tokens (no full
// block), 4 samples each. Against an unshared run the tokens are equal and
// the log-probs agree to rounding (decode-time values) or bit for bit (exact_logprobs: the
// trainer's recomputation over the same tokens).
TEST_F(EngineKvSharing, SharedOutputsEqualUnshared) {
  auto prompts = random_prompts({9, 8, 3}, 97, 11);
  auto requests = grpo_requests(prompts, 4, 12);
  auto shared_engine = Engine::load(dir_->string(), sharing(true));
  // generate() queues all requests at once (submit_all): every follower finds its leader.
  auto shared = shared_engine->generate(requests);
  EXPECT_EQ(shared_engine->model_info()["prefix_shared_tokens"].get<int64_t>(), 3 * (9 + 8 + 3));
  auto unshared_engine = Engine::load(dir_->string(), sharing(false));
  auto unshared = unshared_engine->generate(requests);
  EXPECT_EQ(unshared_engine->model_info()["prefix_shared_tokens"].get<int64_t>(), 0);
  expect_same_tokens(shared, unshared);
  // Same seed for every sample of a prompt: the same tokens for leader and followers. (Not the
  // same log-prob bits: identical rows of one GEMM round differently by position in it.)
  auto same_seed = requests;
  for (auto& r : same_seed) r.sampling.seed = 5;
  auto copies = shared_engine->generate(same_seed);
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_EQ(copies[i].output_ids, copies[i / 4 * 4].output_ids) << i;
  }
  // Every block came back: the memory can be released and the cache flushed.
  shared_engine->flush_cache();
  shared_engine->release_memory(false);
  shared_engine->resume_memory();
  expect_same_tokens(shared_engine->generate(requests), shared);
}

// Exact log-probs (the trainer's recomputation over the same tokens) are bit-identical with and
// without sharing, 8 samples per prompt.
TEST_F(EngineKvSharing, SharedEqualsUnsharedBitForBitWithExactLogprobs) {
  auto prompts = random_prompts({13, 6}, 97, 12);
  auto requests = grpo_requests(prompts, 8, 10);
  auto on = sharing(true), off = sharing(false);
  on.exact_logprobs = off.exact_logprobs = true;
  auto shared = Engine::load(dir_->string(), on)->generate(requests);
  auto unshared = Engine::load(dir_->string(), off)->generate(requests);
  ASSERT_EQ(shared.size(), unshared.size());
  for (size_t i = 0; i < shared.size(); ++i) {
    EXPECT_EQ(shared[i].output_ids, unshared[i].output_ids) << i;
    EXPECT_TRUE(same_bits(shared[i].output_logprobs, unshared[i].output_logprobs)) << i;
  }
}

// A follower reserves only its own blocks: n samples of a 64-token prompt fit in a cache that
// could not hold n unshared copies.
TEST_F(EngineKvSharing, ReservationsCountSharedBlocksOnce) {
  auto o = sharing(true);
  o.max_total_tokens = 64 + 4 * 8 + 4 * 8;  // one prompt + 4 x (8 new tokens) + slack
  auto engine = Engine::load(dir_->string(), o);
  auto requests = grpo_requests(random_prompts({64}, 97, 13), 4, 8);
  auto start = std::chrono::steady_clock::now();
  auto outs = engine->generate(requests);
  for (const auto& out : outs) EXPECT_EQ(out.output_ids.size(), 8u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

// The leader is aborted while paused, before its prompt is prefilled: a follower becomes the
// leader and every other sample is what it would have been unshared. Then a leader is aborted
// while its former followers decode: they run on in the blocks they still hold.
TEST_F(EngineKvSharing, AbortingALeaderLeavesItsFollowersIntact) {
  auto prompt = random_prompts({10}, 97, 14)[0];
  auto requests = grpo_requests({prompt}, 4, 16);
  auto expected = Engine::load(dir_->string(), sharing(false))->generate(requests);
  auto engine = Engine::load(dir_->string(), sharing(true));
  for (int when : {0, 1}) {
    std::vector<std::promise<GenerateOutput>> done(requests.size());
    std::vector<RequestId> ids;
    std::atomic<int> leader_tokens{0};
    // The leader's third token holds the engine thread (steps run without the engine's lock)
    // until the abort is in, so the leader cannot finish first however fast the machine is.
    std::promise<void> abort_sent;
    auto abort_sent_future = abort_sent.get_future().share();
    std::promise<void> leader_at_three;
    engine->pause_generation();
    for (size_t i = 0; i < requests.size(); ++i) {
      ids.push_back(engine->submit(
          requests[i], [&, i](RequestId, GenerateOutput out) { done[i].set_value(std::move(out)); },
          [&, i, when](RequestId, const std::vector<int64_t>& t, const std::vector<float>&) {
            if (i != 0 || when != 1) return;
            leader_tokens += static_cast<int>(t.size());
            if (leader_tokens != 3) return;
            leader_at_three.set_value();
            abort_sent_future.wait_for(std::chrono::seconds(60));
          }));
    }
    if (when == 0) {
      EXPECT_TRUE(engine->abort(ids[0]));
    }
    engine->continue_generation();
    if (when == 1) {
      ASSERT_EQ(leader_at_three.get_future().wait_for(std::chrono::seconds(60)),
                std::future_status::ready);
      EXPECT_TRUE(engine->abort(ids[0]));
      abort_sent.set_value();
    }
    std::vector<GenerateOutput> outs;
    for (auto& d : done) outs.push_back(d.get_future().get());
    EXPECT_EQ(outs[0].finish_reason, FinishReason::kAbort);
    outs.erase(outs.begin());
    expect_same_tokens(outs, {expected.begin() + 1, expected.end()});
    EXPECT_EQ(engine->num_running(), 0);
  }
  engine->release_memory(false);  // every shared block was freed by its last owner
  engine->resume_memory();
}

// A follower whose token callback throws ends alone; its leader and the others finish.
TEST_F(EngineKvSharing, AFailingFollowerEndsAlone) {
  auto engine = Engine::load(dir_->string(), sharing(true));
  auto requests = grpo_requests(random_prompts({7}, 97, 15), 3, 6);
  auto expected = Engine::load(dir_->string(), sharing(false))->generate(requests);
  std::vector<std::promise<GenerateOutput>> done(3);
  engine->pause_generation();
  for (size_t i = 0; i < 3; ++i) {
    engine->submit(
        requests[i], [&, i](RequestId, GenerateOutput out) { done[i].set_value(std::move(out)); },
        [i](RequestId, const std::vector<int64_t>&, const std::vector<float>&) {
          if (i == 1) throw std::runtime_error("follower callback failed");
        });
  }
  engine->continue_generation();
  auto leader = done[0].get_future().get();
  auto failed = done[1].get_future().get();
  auto other = done[2].get_future().get();
  EXPECT_EQ(failed.finish_reason, FinishReason::kAbort);
  EXPECT_NE(failed.error.find("follower callback failed"), std::string::npos) << failed.error;
  EXPECT_EQ(leader.output_ids, expected[0].output_ids);
  EXPECT_EQ(other.output_ids, expected[2].output_ids);
}

// Weights change between two submissions of the same prompt: the second is not a follower of
// a leader admitted under the old weights (here: the leader is still queued while paused).
TEST_F(EngineKvSharing, NeverSharesAcrossWeightVersions) {
  auto engine = Engine::load(dir_->string(), sharing(true));
  auto requests = grpo_requests(random_prompts({9}, 97, 16), 2, 4);
  auto named = engine->model().named_weights();
  std::vector<std::promise<GenerateOutput>> done(2);
  auto deliver = [&](int i) {
    return [&, i](RequestId, GenerateOutput out) { done[i].set_value(std::move(out)); };
  };
  engine->submit(requests[0], deliver(0));
  engine->update_weights_from_tensors(named, 7);
  engine->submit(requests[1], deliver(1));
  done[0].get_future().get();
  done[1].get_future().get();
  EXPECT_LE(engine->model_info()["prefix_shared_tokens"].get<int64_t>(), 9);
}

// ---- chunked prefill ----

// A 150-token prompt in 32-token chunks (4 intermediate chunks of K/V, the last one sampling)
// against one-shot prefill. Greedy tokens must be equal. Decode-time log-probs differ only by
// summation order: chunks attend through the cached path (SDPA over the cache with a mask)
// instead of the trainer's per-document attention, a few fp32 ulps per layer, so |delta| stays
// below 1e-4 here; with exact_logprobs the values are recomputed by the trainer's own forward
// over the same tokens and are bit-identical. (Exact runs generate each prompt alone: the engine
// re-scores the sequences that finish in one step together, chunking changes which finish
// together, and the CPU GEMMs round a row differently with the rows in the call.)
TEST_F(EngineKvSharing, ChunkedPrefillEqualsUnchunked) {
  auto prompts = random_prompts({150, 40, 5}, 97, 17);
  auto generate = [&](const EngineOptions& options, bool one_at_a_time) {
    auto engine = Engine::load(dir_->string(), options);
    auto requests = greedy_requests(prompts, 20);
    if (!one_at_a_time) return engine->generate(requests);
    std::vector<GenerateOutput> outputs;
    for (const auto& r : requests) outputs.push_back(engine->generate({r}).front());
    return outputs;
  };
  for (bool exact : {false, true}) {
    auto chunked = small_engine_options(), whole = small_engine_options();
    chunked.chunked_prefill_size = 32;
    chunked.max_prefill_tokens = 64;
    whole.chunked_prefill_size = 0;
    chunked.exact_logprobs = whole.exact_logprobs = exact;
    auto a = generate(chunked, exact);
    auto b = generate(whole, exact);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(a[i].output_ids, b[i].output_ids) << i;
      if (exact) {
        EXPECT_TRUE(same_bits(a[i].output_logprobs, b[i].output_logprobs)) << i;
        continue;
      }
      for (size_t t = 0; t < a[i].output_logprobs.size(); ++t) {
        EXPECT_NEAR(a[i].output_logprobs[t], b[i].output_logprobs[t], 1e-4) << i << ":" << t;
      }
    }
  }
}

// Decodes go on while a long prompt is prefilled chunk by chunk.
TEST_F(EngineKvSharing, ChunkedPrefillDoesNotStallDecodes) {
  auto o = small_engine_options();
  o.chunked_prefill_size = 16;
  o.max_prefill_tokens = 16;
  auto engine = Engine::load(dir_->string(), o);
  std::atomic<int> short_tokens{0}, long_tokens_when_short_done{-1};
  std::atomic<int> long_tokens{0};
  std::promise<void> long_done, short_done;
  engine->pause_generation();
  engine->submit(
      greedy_requests({random_prompts({4}, 97, 18)[0]}, 10)[0],
      [&](RequestId, GenerateOutput) {
        long_tokens_when_short_done = long_tokens.load();
        short_done.set_value();
      },
      [&](RequestId, const std::vector<int64_t>& t, const std::vector<float>&) {
        short_tokens += static_cast<int>(t.size());
      });
  engine->submit(
      greedy_requests({random_prompts({400}, 97, 19)[0]}, 2)[0],
      [&](RequestId, GenerateOutput) { long_done.set_value(); },
      [&](RequestId, const std::vector<int64_t>& t, const std::vector<float>&) {
        long_tokens += static_cast<int>(t.size());
      });
  engine->continue_generation();
  short_done.get_future().get();
  long_done.get_future().get();
  // 400 / 16 = 25 chunk steps: the 10 short decodes finish before the long prompt's first token.
  EXPECT_EQ(long_tokens_when_short_done.load(), 0);
}

// ---- memory ----

int64_t bytes_per_token(const Engine& e) {
  const auto& c = e.model().config();
  return KvCache::bytes_per_token(c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
                                  at::kFloat);
}

int64_t weight_bytes(const Engine& e) {
  int64_t bytes = 0;
  for (const auto& [name, t] : e.model().named_weights()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

TEST_F(EngineKvSharing, AutomaticSizeFitsTheBudget) {
  auto o = small_engine_options();
  o.max_total_tokens = 0;
  o.mem_fraction_static = 0.5;
  o.test_memory_bytes = 64'000'000;
  o.max_running_requests = 1 << 20;  // the budget, not the requests, bounds it
  auto engine = Engine::load(dir_->string(), o);
  auto info = engine->model_info();
  const int64_t tokens = info["max_total_tokens"].get<int64_t>();
  const int64_t budget = 32'000'000 - weight_bytes(*engine);
  EXPECT_LE(tokens * bytes_per_token(*engine), budget);
  EXPECT_GT((tokens + o.kv_block_size) * bytes_per_token(*engine), budget);
  EXPECT_EQ(info["kv_cache_bytes"].get<int64_t>(), tokens * bytes_per_token(*engine));
  EXPECT_EQ(engine->generate(greedy_requests({{1, 2, 3}}, 4))[0].output_ids.size(), 4u);
  // The real machine, default fraction: some capacity, at most what the requests can use.
  o.test_memory_bytes = 0;
  o.mem_fraction_static = 0;
  o.max_running_requests = 4;
  auto real = Engine::load(dir_->string(), o);
  EXPECT_EQ(real->model_info()["max_total_tokens"].get<int64_t>(), 4 * 512);
}

TEST_F(EngineKvSharing, ModelThatDoesNotFitFailsAtLoad) {
  auto o = small_engine_options();
  o.max_total_tokens = 0;
  o.test_memory_bytes = 200'000;  // the tiny model's weights alone are ~0.3 MB
  auto msg = furlong::testing::error_of([&] { Engine::load(dir_->string(), o); });
  EXPECT_NE(msg.find("the model's weights need"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--mem-fraction-static"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--dtype"), std::string::npos) << msg;
}

TEST_F(EngineKvSharing, ExplicitCacheLargerThanTheMachineFailsAtLoad) {
  auto o = small_engine_options();
  o.max_total_tokens = int64_t{1} << 40;  // ~10^12 tokens x 768 B: far beyond any host
  auto msg = furlong::testing::error_of([&] { Engine::load(dir_->string(), o); });
  EXPECT_NE(msg.find("--max-total-tokens 1099511627776 needs a KV cache of"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("is available after the weights"), std::string::npos) << msg;
}

}  // namespace
}  // namespace furlong::engine
