// One request's failure must end only that request: a max_new_tokens near 2^63 (whose sum with
// the prompt length used to overflow, pass the context check and then fail the whole step) is
// rejected at submit (as are stop token ids outside the vocabulary and a negative context
// length at load), and a step that fails for one sequence (here its token callback throws)
// finishes that sequence with an error while the others run to completion.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <limits>
#include <stdexcept>

#include "common/test_util.h"
#include "engine_test_util.h"
#include "models/causal_lm.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;
using namespace furlong::engine::testing;
using namespace std::chrono_literals;

class EngineIsolation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(furlong::testing::scratch_dir() / "model");
    write_tiny_model(*dir_, tiny_config("qwen3"), 41, "float32");
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path* dir_;
};
fs::path* EngineIsolation::dir_ = nullptr;

TEST_F(EngineIsolation, MaxNewTokensNearTwoToThe63IsRejectedAtSubmit) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  for (int64_t huge : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 2,
                       std::numeric_limits<int64_t>::max() - 500}) {
    auto request = greedy_requests({{1, 2, 3}}, huge)[0];
    auto msg = furlong::testing::error_of(
        [&] { engine->submit(request, [](RequestId, GenerateOutput) {}, {}); });
    EXPECT_NE(msg.find("exceeds the context length 512"), std::string::npos) << msg;
  }
  // The engine is unharmed: an ordinary request right after runs to its length.
  auto out = engine->generate(greedy_requests({{1, 2, 3}}, 12))[0];
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.output_ids.size(), 12u);
}

TEST_F(EngineIsolation, NegativeContextLengthIsRejectedAtLoad) {
  auto options = small_engine_options();
  options.context_length = -5;
  auto msg = furlong::testing::error_of([&] { Engine::load(dir_->string(), options); });
  EXPECT_NE(msg.find("--context-length must be > 0, or 0 for the model's max_position_embeddings; "
                     "got -5"),
            std::string::npos)
      << msg;
}

TEST_F(EngineIsolation, StopTokenIdsOutsideTheVocabularyAreRejectedAtSubmit) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  const int64_t vocab = engine->model().config().vocab_size;
  for (int64_t bad : {vocab, int64_t{-1}}) {
    auto request = greedy_requests({{1, 2, 3}}, 4)[0];
    request.sampling.stop_token_ids = {1, bad};
    auto msg = furlong::testing::error_of(
        [&] { engine->submit(request, [](RequestId, GenerateOutput) {}, {}); });
    EXPECT_NE(msg.find("generate: stop_token_ids[1] = " + std::to_string(bad) +
                       " is outside the vocabulary [0, " + std::to_string(vocab) + ")"),
              std::string::npos)
        << msg;
  }
  auto request = greedy_requests({{1, 2, 3}}, 4)[0];
  request.sampling.stop_token_ids = {vocab - 1};
  EXPECT_NE(engine->generate({request})[0].finish_reason, FinishReason::kAbort);
}

TEST_F(EngineIsolation, AFailingRequestEndsAloneAndTheOthersFinish) {
  auto engine = Engine::load(dir_->string(), small_engine_options());
  auto prompts = random_prompts({6, 9, 4}, 97, 5);
  auto requests = greedy_requests(prompts, 40);
  auto alone = engine->generate({requests[1]})[0];
  std::promise<GenerateOutput> failing_done, other1_done, other2_done;
  int seen = 0;  // the callbacks run on the scheduler thread only
  engine->submit(
      requests[0], [&](RequestId, GenerateOutput out) { failing_done.set_value(std::move(out)); },
      [&](RequestId, const std::vector<int64_t>&, const std::vector<float>&) {
        if (++seen == 3) throw std::runtime_error("token callback failed on purpose");
      });
  engine->submit(requests[1],
                 [&](RequestId, GenerateOutput out) { other1_done.set_value(std::move(out)); }, {});
  engine->submit(requests[2],
                 [&](RequestId, GenerateOutput out) { other2_done.set_value(std::move(out)); }, {});
  auto failing_future = failing_done.get_future();
  auto other1_future = other1_done.get_future();
  auto other2_future = other2_done.get_future();
  ASSERT_EQ(failing_future.wait_for(120s), std::future_status::ready);
  ASSERT_EQ(other1_future.wait_for(120s), std::future_status::ready);
  ASSERT_EQ(other2_future.wait_for(120s), std::future_status::ready);
  auto failing = failing_future.get();
  EXPECT_EQ(failing.finish_reason, FinishReason::kAbort);
  EXPECT_NE(failing.error.find("token callback failed on purpose"), std::string::npos)
      << failing.error;
  for (auto* out : {&other1_future, &other2_future}) {
    auto o = out->get();
    EXPECT_EQ(o.finish_reason, FinishReason::kLength) << o.error;
    EXPECT_EQ(o.output_ids.size(), 40u);
    EXPECT_TRUE(o.error.empty()) << o.error;
    if (out == &other1_future) {
      EXPECT_EQ(o.output_ids, alone.output_ids);
    }
  }
  EXPECT_EQ(engine->num_running(), 0);
}

}  // namespace
}  // namespace furlong::engine
