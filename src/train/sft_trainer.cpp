#include "train/sft_trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <numeric>

#include "backend/backend.h"
#include "core/log.h"
#include "core/progress.h"
#include "dist/process_group.h"
#include "train/driver.h"
#include "train/sft_data.h"

namespace furlong::train {
namespace {

using backend::StepMetrics;

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
                get("grad_norm"), get("lr-pg_0"), get("tokens") / seconds);
  return buf;
}

}  // namespace

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
  auto groups = init_process_groups(o);
  auto& world = groups->world();
  const bool root = world.rank() == 0;
  validate_options(o, world.size());
  FURLONG_CHECK(!o.data.prompt_data.empty(), "--prompt-data is required (a JSONL file)");
  SftDataOptions data_options{.path = o.data.prompt_data,
                              .input_key = o.data.input_key,
                              .response_key = o.data.response_key,
                              .tool_key = o.data.tool_key,
                              .apply_chat_template = o.data.apply_chat_template,
                              .chat_template_path = o.data.chat_template_path.value_or(""),
                              .chat_template_kwargs = chat_template_kwargs(o.data),
                              .max_length = o.data.max_length};
  auto data = load_sft_samples(data_options, o.model.hf_checkpoint);
  derive_batch_sizes(o, static_cast<int64_t>(data.size()));
  if (root) {
    LOG_INFO("SFT on ", data.size(), " samples: ", o.derived.num_rollout, " rollouts of ",
             *o.data.rollout_batch_size, " samples, global batch ", o.derived.global_batch_size,
             ", ", o.derived.train_iters, " optimizer steps, ", world.size(), " rank(s)");
  }
  auto backend = furlong::backend::make_backend(backend_options(o), *groups);
  const int64_t start = backend->init();
  // The one-line step log below is SFT's console output; the logger feeds JSONL/TensorBoard.
  std::unique_ptr<metrics::MetricsLogger> logger;
  if (root) logger = make_metrics_logger(o, start, /*console_table=*/false);
  for (int64_t rollout = start; rollout < o.derived.num_rollout; ++rollout) {
    const auto steps = backend->train(rollout, rollout_samples(data, rollout, o));
    for (size_t j = 0; j < steps.size() && root; ++j) {
      LOG_INFO(format_step(steps[j], o.derived.train_iters));
      // miles' counter: train/step = rollout_id * steps_per_rollout + step (0-based).
      const auto train_step =
          rollout * static_cast<int64_t>(steps.size()) + static_cast<int64_t>(j);
      std::map<std::string, double> row;
      for (const auto& [k, v] : steps[j].values) row["train/" + k] = v;
      row["train/step"] = static_cast<double>(train_step);
      log_metrics(*logger, train_step, row);
    }
    if (save_due(o, rollout, world)) {
      backend->save_model(rollout, Json::object());
      if (root) remove_save_sentinel(o);
    }
  }
  if (root) finish_metrics(o, logger, "furlong SFT run");
  world.barrier();
  return 0;
}

}  // namespace furlong::train
