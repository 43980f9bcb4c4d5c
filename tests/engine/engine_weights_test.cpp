// Weight updates (in process and over a two-rank Gloo group), the weights digest, and memory
// release/resume: after an update the engine must generate exactly what a freshly loaded engine
// with the new weights generates, and hold the sender's bits (digest); a corrupted transfer
// must show in the digest.
#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <limits>
#include <thread>

#include "common/test_util.h"
#include "core/digest.h"
#include "engine/weight_sync.h"
#include "engine_test_util.h"
#include "models/hf_model.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;
using namespace furlong::engine::testing;

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  ::close(fd);
  return ntohs(sa.sin_port);
}

class EngineWeights : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto root = furlong::testing::scratch_dir();
    old_dir_ = new fs::path(root / "old");
    new_dir_ = new fs::path(root / "new");
    write_tiny_model(*old_dir_, tiny_config("qwen2"), 1, "bfloat16");
    write_tiny_model(*new_dir_, tiny_config("qwen2"), 2, "bfloat16");
  }
  static void TearDownTestSuite() {
    delete old_dir_;
    delete new_dir_;
  }
  // The trainer's copy of the new weights (fp32 here: the update casts to the engine dtype).
  static NamedTensors trainer_weights() {
    models::LoadOptions o;
    o.dtype = at::kFloat;
    return models::load_hf_model(*new_dir_, o)->named_weights();
  }
  // What the trainer sends: its weights cast to the engine's dtype.
  static NamedTensors sent_weights() {
    auto named = trainer_weights();
    for (auto& [name, t] : named) t = t.to(at::kBFloat16);
    return named;
  }
  static std::vector<std::vector<int64_t>> outputs_of(Engine& engine) {
    auto outs = engine.generate(greedy_requests(random_prompts({4, 13, 7}, 97, 5), 12));
    std::vector<std::vector<int64_t>> ids;
    for (const auto& o : outs) {
      EXPECT_EQ(o.output_ids.size(), 12u);
      ids.push_back(o.output_ids);
    }
    return ids;
  }
  static fs::path* old_dir_;
  static fs::path* new_dir_;
};
fs::path* EngineWeights::old_dir_ = nullptr;
fs::path* EngineWeights::new_dir_ = nullptr;

TEST_F(EngineWeights, InProcessUpdateEqualsFreshLoad) {
  auto fresh = Engine::load(new_dir_->string(), small_engine_options());
  auto expected = outputs_of(*fresh);
  auto engine = Engine::load(old_dir_->string(), small_engine_options());
  auto before = outputs_of(*engine);
  ASSERT_NE(before, expected) << "the two seeds should give different models";
  EXPECT_NE(engine->weights_digest(), fresh->weights_digest());

  engine->update_weights_from_tensors(trainer_weights(), 7);
  EXPECT_EQ(engine->weight_version(), 7);
  EXPECT_EQ(engine->weights_digest(), tensors_digest(sent_weights()));
  EXPECT_EQ(engine->weights_digest(), fresh->weights_digest());
  auto after = outputs_of(*engine);
  EXPECT_EQ(after, expected);
  auto out = engine->generate(greedy_requests({{1, 2, 3}}, 2))[0];
  EXPECT_EQ(out.weight_version, 7);
}

TEST_F(EngineWeights, BadUpdatesChangeNothing) {
  auto engine = Engine::load(old_dir_->string(), small_engine_options());
  auto digest = engine->weights_digest();
  auto named = trainer_weights();
  named.back().second = at::zeros({3, 3});
  auto msg = furlong::testing::error_of([&] { engine->update_weights_from_tensors(named); });
  EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
  msg = furlong::testing::error_of([&] {
    engine->update_weights_from_tensors({{"model.nope.weight", at::zeros({2})}});
  });
  EXPECT_NE(msg.find("model.nope.weight"), std::string::npos) << msg;
  EXPECT_EQ(engine->weights_digest(), digest);
}

// A checkpoint on disk gets the trainer's finiteness check: one NaN is refused naming the tensor,
// and the served weights stay as they were.
TEST_F(EngineWeights, NonFiniteWeightsFromDiskAreRefusedNamingTheTensor) {
  auto engine = Engine::load(old_dir_->string(), small_engine_options());
  auto digest = engine->weights_digest();
  auto before = outputs_of(*engine);
  models::LoadOptions o;
  o.dtype = at::kFloat;
  auto model = models::load_hf_model(*new_dir_, o);
  auto named = model->named_weights();
  const std::string bad = named[2].first;
  named[2].second.detach().view(-1)[3] = std::numeric_limits<float>::quiet_NaN();
  const auto dir = furlong::testing::scratch_dir() / "nan";
  models::save_hf_model(*model, dir, at::kBFloat16);
  auto msg = furlong::testing::error_of([&] { engine->update_weights_from_disk(dir.string(), 5); });
  EXPECT_NE(msg.find("tensor '" + bad + "' holds NaN or inf values"), std::string::npos) << msg;
  EXPECT_EQ(engine->weights_digest(), digest);
  EXPECT_EQ(engine->weight_version(), 0);
  EXPECT_EQ(outputs_of(*engine), before);
}

// A FIFO named model.safetensors is refused at once (opening it would wait for a writer).
// Bounded: if the update hangs, the test fails and then unblocks it by opening the writer side.
TEST_F(EngineWeights, FifoWeightsFileIsRefusedWithoutBlocking) {
  auto engine = Engine::load(old_dir_->string(), small_engine_options());
  const auto dir = furlong::testing::scratch_dir() / "fifo";
  fs::create_directories(dir);
  fs::copy_file(*new_dir_ / "config.json", dir / "config.json");
  const auto fifo = dir / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto update = std::async(std::launch::async, [&] {
    return furlong::testing::error_of([&] { engine->update_weights_from_disk(dir.string()); });
  });
  if (update.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "update_weights_from_disk blocked on a FIFO";
    int writer = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
    if (writer >= 0) ::close(writer);
  }
  auto msg = update.get();
  EXPECT_NE(msg.find(fifo.string() + ": not a regular file"), std::string::npos) << msg;
}

// Two "processes" as two threads, each with its own c10d store client and Gloo group: the
// trainer thread (rank 0) broadcasts; the engine (rank 1) receives.
TEST_F(EngineWeights, DistributedUpdateEqualsFreshLoadAndCorruptionIsDetected) {
  auto fresh = Engine::load(new_dir_->string(), small_engine_options());
  auto expected = outputs_of(*fresh);
  auto engine = Engine::load(old_dir_->string(), small_engine_options());

  WeightGroupSpec spec;
  spec.master_port = free_port();
  spec.world_size = 2;
  spec.rank_offset = 1;
  spec.backend = "gloo";
  auto sent = sent_weights();
  const std::string sender_digest = tensors_digest(sent);
  auto corrupted = sent;
  corrupted[3].second = corrupted[3].second.clone();
  corrupted[3].second.view(-1)[5] += 1.0;  // one flipped value

  std::exception_ptr trainer_error;
  std::thread trainer([&] {
    try {
      auto groups = join_weight_group(spec, 0);
      broadcast_weights(groups->world(), sent);
      broadcast_weights(groups->world(), corrupted);
    } catch (...) {
      trainer_error = std::current_exception();
    }
  });
  engine->init_weights_update_group(spec);
  engine->update_weights_from_distributed(weight_metas(sent), 3);
  EXPECT_EQ(engine->weight_version(), 3);
  EXPECT_EQ(engine->weights_digest(), sender_digest);
  EXPECT_EQ(outputs_of(*engine), expected);
  engine->update_weights_from_distributed(weight_metas(sent), 4);
  EXPECT_NE(engine->weights_digest(), sender_digest) << "the digest missed a corrupted value";
  // Both sides leave the group together (rank 0 waits for the others to check out).
  engine->destroy_weights_update_group();
  trainer.join();
  if (trainer_error) std::rethrow_exception(trainer_error);
}

TEST_F(EngineWeights, ReleaseAndResumeMemory) {
  auto engine = Engine::load(old_dir_->string(), small_engine_options());
  auto before = outputs_of(*engine);
  auto old_weights = engine->model().named_weights();
  for (auto& [name, t] : old_weights) t = t.clone();

  engine->release_memory(/*include_weights=*/false);
  EXPECT_TRUE(engine->memory_released());
  auto msg = furlong::testing::error_of([&] { outputs_of(*engine); });
  EXPECT_NE(msg.find("resume_memory"), std::string::npos) << msg;
  engine->resume_memory();
  EXPECT_EQ(outputs_of(*engine), before);

  engine->release_memory(/*include_weights=*/true);
  engine->resume_memory();
  msg = furlong::testing::error_of([&] { outputs_of(*engine); });
  EXPECT_NE(msg.find("weights were released"), std::string::npos) << msg;
  engine->update_weights_from_tensors(old_weights, 2);
  EXPECT_EQ(outputs_of(*engine), before);
}

}  // namespace
}  // namespace furlong::engine
