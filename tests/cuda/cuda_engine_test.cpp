// The engine's device memory, decode steps and weight sync on the GPU: release/resume (SGLang's
// release/resume_memory_occupation) hands the KV cache's device memory back, measured with the
// CUDA caching allocator's statistics from C++; an in-process weight update (the colocated
// sync) holds the sender's bits, checked by digest, and a corrupted tensor shows in it; a decode
// step queues its work without waiting for the GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>

#include "core/device_memory.h"
#include "core/digest.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "models/hf_model.h"

#include "engine/kv_cache.h"
#include "engine/paged_forward.h"

#ifdef FURLONG_CUDA_TESTS_CUDA_TORCH
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace furlong {
namespace {

using cuda_testing::record;

std::vector<std::vector<int64_t>> greedy_outputs(engine::Engine& eng) {
  std::vector<engine::GenerateRequest> requests;
  for (int64_t len : {3, 9, 14}) {
    engine::GenerateRequest r;
    for (int64_t i = 0; i < len; ++i) r.input_ids.push_back((i * 7 + len) % 17);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.max_new_tokens = 10;
    requests.push_back(r);
  }
  std::vector<std::vector<int64_t>> ids;
  for (const auto& out : eng.generate(requests)) ids.push_back(out.output_ids);
  return ids;
}

engine::EngineOptions device_engine_options(c10::Device device, int64_t tokens) {
  engine::EngineOptions eo;
  eo.dtype = "bfloat16";
  eo.device = device.str();
  eo.max_total_tokens = tokens;
  return eo;
}

#ifdef FURLONG_CUDA_TESTS_CUDA_TORCH
struct AllocatorFigures {
  int64_t allocated = 0, reserved = 0, free = 0;
};
// Entry 0 of the per-pool statistics is StatType::AGGREGATE (all pools) in every torch version;
// the enum itself moved between headers and namespaces (2.11 and 2.14 differ), so it is not named.
constexpr size_t kAllPools = 0;
int64_t reserved_bytes(c10::Device device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index())
      .reserved_bytes[kAllPools]
      .current;
}
AllocatorFigures allocator_figures(c10::Device device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  AllocatorFigures f;
  f.allocated = stats.allocated_bytes[kAllPools].current;
  f.reserved = stats.reserved_bytes[kAllPools].current;
  f.free = device_memory(device).available_bytes;  // empties the cache first
  return f;
}
#endif

// A 2^20-token bf16 cache of the tiny model is 256 MiB (2 x 2 layers x 2 KV heads x 16 x 2 B per
// token). release_memory must return it to the device (the caching allocator's reserved bytes
// drop by at least that, without anyone emptying the cache), resume_memory must take it again,
// and greedy outputs must not change.
TEST(CudaEngineMemory, ReleaseReturnsTheKvCacheToTheDevice) {
#ifndef FURLONG_CUDA_TESTS_CUDA_TORCH
  GTEST_SKIP() << "built against a CPU libtorch: no CUDA caching allocator to measure ("
               << cuda_testing::skip_reason() << ")";
#else
  FURLONG_REQUIRE_TEST_DEVICE(device);
  if (!device.is_cuda()) GTEST_SKIP() << "device memory figures need a GPU";
  const auto dir = cuda_testing::write_tiny_model("memory_bf16", 9, "bfloat16");
  auto eng = engine::Engine::load(dir.string(), device_engine_options(device, int64_t{1} << 20));
  const int64_t kv_bytes = eng->model_info()["kv_cache_bytes"].get<int64_t>();
  ASSERT_GE(kv_bytes, int64_t{200} << 20);
  const auto before_ids = greedy_outputs(*eng);
  const auto loaded = allocator_figures(device);
  eng->release_memory(/*include_weights=*/false);
  const int64_t reserved_after_release = reserved_bytes(device);  // before anyone empties it
  const auto released = allocator_figures(device);
  eng->resume_memory();
  const auto resumed = allocator_figures(device);
  record("engine_release_resume_memory", {{"kv_cache_bytes", kv_bytes},
                                          {"allocated_loaded", loaded.allocated},
                                          {"allocated_released", released.allocated},
                                          {"allocated_resumed", resumed.allocated},
                                          {"reserved_loaded", loaded.reserved},
                                          {"reserved_right_after_release", reserved_after_release},
                                          {"device_free_loaded", loaded.free},
                                          {"device_free_released", released.free},
                                          {"device_free_resumed", resumed.free}});
  EXPECT_GE(loaded.allocated - released.allocated, kv_bytes);
  EXPECT_GE(loaded.reserved - reserved_after_release, kv_bytes)
      << "release_memory freed the cache into the caching allocator but did not return it to "
         "the device";
  EXPECT_GE(released.free - loaded.free, kv_bytes * 9 / 10);
  EXPECT_GE(resumed.allocated - released.allocated, kv_bytes);
  EXPECT_EQ(greedy_outputs(*eng), before_ids);
#endif
}

// A decode step (paged_forward over one new token per sequence, the gathered attention over the
// paged cache) never waits for the GPU: every index it needs is built on the host and uploaded
// without blocking. CUDA's sync debug mode turns any synchronizing call (a blocking copy,
// .item(), a stream sync) into an error while the steps are queued. On the CPU (with
// FURLONG_CUDA_TESTS_ON_CPU=1) the steps run without that check.
TEST(CudaEngineDecode, DecodeStepsQueueWithoutWaitingForTheGpu) {
  FURLONG_REQUIRE_TEST_DEVICE(device);
  const auto dir = cuda_testing::write_tiny_model("decode_sync", 3, "bfloat16");
  auto model = models::load_hf_model(dir, {.dtype = at::kBFloat16, .device = device});
  const auto& cfg = model->config();
  engine::KvCache cache(cfg.num_hidden_layers, 8, 16, cfg.num_key_value_heads, cfg.head_dim,
                        at::TensorOptions().dtype(at::kBFloat16).device(device));
  models::ForwardOptions forward;
  std::vector<std::vector<int64_t>> tokens = {{1, 2, 3}, {4, 5, 6, 7, 8}, {9, 10}};
  std::vector<at::Tensor> slots;
  std::vector<engine::StepSequence> steps;
  for (const auto& t : tokens) {
    slots.push_back(cache.slots_for(*cache.allocate_tokens(32), 32));
    steps.push_back({t.data(), static_cast<int64_t>(t.size()), 0, slots.back()});
  }
  engine::paged_forward(*model, cache, steps, forward);  // the prompts (may synchronize)
#ifdef FURLONG_CUDA_TESTS_CUDA_TORCH
  auto& warnings = c10::cuda::warning_state();
  const auto before = warnings.get_sync_debug_mode();
  if (device.is_cuda()) warnings.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
#endif
  std::vector<at::Tensor> hidden;
  try {
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i].push_back(11 + step);
        steps[i] = {&tokens[i].back(), 1, static_cast<int64_t>(tokens[i].size()) - 1, slots[i]};
      }
      hidden.push_back(engine::paged_forward(*model, cache, steps, forward));
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "a decode step synchronized with the GPU: " << e.what();
  }
#ifdef FURLONG_CUDA_TESTS_CUDA_TORCH
  warnings.set_sync_debug_mode(before);
#endif
  ASSERT_EQ(hidden.size(), 4u);
  for (const auto& h : hidden) EXPECT_TRUE(h.isfinite().all().item<bool>());
  record("decode_without_host_sync", {{"device", device.str()}, {"steps", hidden.size()}});
}

// The colocated weight sync on one device: the trainer's fp32 weights (on the device) go into
// the engine, which must then hold exactly the sender's bf16 bits (digest), equal a fresh load
// of the new weights, and generate what that fresh engine generates; one corrupted value must
// change the digest.
TEST(CudaWeightSync, InProcessUpdateHoldsTheSendersBits) {
  FURLONG_REQUIRE_TEST_DEVICE(device);
  const auto old_dir = cuda_testing::write_tiny_model("sync_old", 1, "bfloat16");
  const auto new_dir = cuda_testing::write_tiny_model("sync_new", 2, "bfloat16");
  auto trainer = models::load_hf_model(new_dir, {.dtype = at::kFloat, .device = device});
  auto named = trainer->named_weights();
  std::vector<std::pair<std::string, at::Tensor>> sent;
  for (const auto& [name, t] : named) sent.emplace_back(name, t.to(at::kBFloat16).cpu());
  auto fresh = engine::Engine::load(new_dir.string(), device_engine_options(device, 4096));
  auto eng = engine::Engine::load(old_dir.string(), device_engine_options(device, 4096));
  ASSERT_NE(eng->weights_digest(), fresh->weights_digest());
  const auto start = std::chrono::steady_clock::now();
  eng->update_weights_from_tensors(named, 5);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  record("weight_sync_in_process",
         {{"device", device.str()}, {"seconds", seconds}, {"digest", eng->weights_digest()}});
  EXPECT_EQ(eng->weight_version(), 5);
  EXPECT_EQ(eng->weights_digest(), tensors_digest(sent));
  EXPECT_EQ(eng->weights_digest(), fresh->weights_digest());
  EXPECT_EQ(greedy_outputs(*eng), greedy_outputs(*fresh));

  auto corrupted = named;
  auto& t = corrupted.back().second;
  t = t.clone();
  t.view(-1)[0].add_(1.0);
  eng->update_weights_from_tensors(corrupted, 6);
  EXPECT_NE(eng->weights_digest(), tensors_digest(sent)) << "the digest missed a corrupted value";
}

}  // namespace
}  // namespace furlong
