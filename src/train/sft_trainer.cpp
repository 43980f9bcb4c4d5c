#include "train/sft_trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "core/jsonl.h"
#include "core/log.h"
#include "core/progress.h"
#include "dist/process_group.h"
#include "train/backend.h"
#include "train/sft_data.h"

namespace furlong::train {
namespace {

// Derives the batch sizes and run length (miles' rules) and stores them in options.derived.
void derive(TrainOptions& o, size_t dataset_size) {
  auto& d = o.data;
  int64_t rbs = d.rollout_batch_size.value_or(o.batch.global_batch_size.value_or(0));
  FURLONG_CHECK(rbs > 0, "set --rollout-batch-size or --global-batch-size (samples per step)");
  int64_t samples_per_rollout = rbs * d.n_samples_per_prompt;
  int64_t gbs =
      o.batch.global_batch_size.value_or(samples_per_rollout / d.num_steps_per_rollout.value_or(1));
  if (d.num_steps_per_rollout) {
    FURLONG_CHECK(gbs * *d.num_steps_per_rollout == samples_per_rollout, "--global-batch-size ",
                  gbs, " disagrees with --num-steps-per-rollout ", *d.num_steps_per_rollout,
                  " (rollout of ", samples_per_rollout, " samples)");
  }
  FURLONG_CHECK(gbs > 0 && samples_per_rollout % gbs == 0, "a rollout of ", samples_per_rollout,
                " samples must be a multiple of --global-batch-size ", gbs);
  int64_t num_rollout =
      d.num_rollout.value_or(static_cast<int64_t>(dataset_size) / rbs * d.num_epoch.value_or(1));
  FURLONG_CHECK(num_rollout > 0, "the run has no steps: ", dataset_size,
                " samples with --rollout-batch-size ", rbs);
  o.data.rollout_batch_size = rbs;
  o.derived.global_batch_size = gbs;
  o.derived.num_rollout = num_rollout;
  o.derived.train_iters = num_rollout * samples_per_rollout / gbs;
}

std::vector<rl::Sample> rollout_samples(const std::vector<rl::Sample>& data, int64_t rollout_id,
                                        const TrainOptions& o) {
  const int64_t rbs = *o.data.rollout_batch_size, n = static_cast<int64_t>(data.size());
  std::vector<rl::Sample> batch;
  for (int64_t k = 0; k < rbs; ++k) {
    int64_t global = rollout_id * rbs + k;
    auto order = epoch_order(data.size(), global / n, o.data.rollout_shuffle, o.data.rollout_seed);
    batch.push_back(data[order[global % n]]);
  }
  return batch;
}

std::string format_step(const StepMetrics& m, int64_t total_steps) {
  char buf[256];
  auto get = [&](const char* k) { return m.values.count(k) ? m.values.at(k) : 0.0; };
  double seconds = std::max(get("step_time"), 1e-9);
  std::snprintf(buf, sizeof(buf),
                "step %lld/%lld | loss %.4f | grad_norm %.4f | lr %.3e | %.0f tok/s",
                static_cast<long long>(m.step), static_cast<long long>(total_steps), get("loss"),
                get("grad_norm"), get("lr"), get("tokens") / seconds);
  return buf;
}

}  // namespace

bool save_due(const TrainOptions& o, int64_t rollout_id, dist::Group& world) {
  if (!o.checkpoint.save) return false;
  int64_t due = 0;
  if (world.rank() == 0) {
    bool sentinel = o.checkpoint.save_trigger_sentinel &&
                    std::filesystem::exists(*o.checkpoint.save_trigger_sentinel);
    bool interval =
        o.checkpoint.save_interval && ((rollout_id + 1) % *o.checkpoint.save_interval == 0 ||
                                       rollout_id + 1 == o.derived.num_rollout);
    due = sentinel || interval ? 1 : 0;
  }
  auto flag = at::tensor({due}, at::kLong);
  world.broadcast(flag, 0);
  return flag.item<int64_t>() != 0;
}

std::vector<size_t> epoch_order(size_t n, int64_t epoch, bool shuffle, int64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed + epoch));
  auto perm = at::randperm(static_cast<int64_t>(n), gen, at::kLong);
  for (size_t i = 0; i < n; ++i)
    order[i] = static_cast<size_t>(perm[static_cast<int64_t>(i)].item<int64_t>());
  return order;
}

int run_sft(TrainOptions o) {
  dist::InitOptions init;
  init.backend = dist::parse_backend(o.parallel.distributed_backend, "--distributed-backend");
  init.timeout = std::chrono::minutes(o.parallel.distributed_timeout_minutes);
  auto groups = dist::ProcessGroups::init(dist::rendezvous_from_env(), init);
  const int world = groups->world().size();
  const bool root = groups->world().rank() == 0;
  validate_options(o, world);
  FURLONG_CHECK(!o.data.prompt_data.empty(), "--prompt-data is required (a JSONL file)");
  SftDataOptions data_options{.path = o.data.prompt_data,
                              .input_key = o.data.input_key,
                              .response_key = o.data.response_key,
                              .apply_chat_template = o.data.apply_chat_template,
                              .max_length = o.data.max_length};
  auto data = load_sft_samples(data_options, o.model.hf_checkpoint);
  derive(o, data.size());
  if (root) {
    LOG_INFO("SFT on ", data.size(), " samples: ", o.derived.num_rollout, " rollouts of ",
             *o.data.rollout_batch_size, " samples, global batch ", o.derived.global_batch_size,
             ", ", o.derived.train_iters, " optimizer steps, ", world, " rank(s)");
  }
  auto backend = make_backend(o, *groups);
  int64_t start = backend->init();
  std::FILE* metrics_file = nullptr;
  if (root && o.logging.metrics_file) {
    metrics_file = std::fopen(o.logging.metrics_file->c_str(), start > 0 ? "a" : "w");
    FURLONG_CHECK(metrics_file != nullptr, *o.logging.metrics_file, ": cannot open for writing");
  }
  for (int64_t rollout = start; rollout < o.derived.num_rollout; ++rollout) {
    for (const auto& m : backend->train(rollout, rollout_samples(data, rollout, o))) {
      if (!root) continue;
      LOG_INFO(format_step(m, o.derived.train_iters));
      if (metrics_file) {
        Json row = {{"step", m.step}};
        for (const auto& [k, v] : m.values) row["train/" + k] = v;
        std::fprintf(metrics_file, "%s\n", row.dump().c_str());
        std::fflush(metrics_file);
      }
    }
    if (save_due(o, rollout, groups->world())) {
      backend->save_model(rollout, Json::object());
      if (root && o.checkpoint.save_trigger_sentinel) {
        std::filesystem::remove(*o.checkpoint.save_trigger_sentinel);
      }
    }
  }
  if (metrics_file) std::fclose(metrics_file);
  groups->world().barrier();
  return 0;
}

}  // namespace furlong::train
