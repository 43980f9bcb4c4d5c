#include "train/driver.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "metrics/html_report.h"

namespace furlong::train {

std::unique_ptr<dist::ProcessGroups> init_process_groups(const TrainOptions& o) {
  dist::InitOptions init;
  init.backend = dist::parse_backend(o.parallel.distributed_backend, "--distributed-backend");
  init.timeout = std::chrono::minutes(o.parallel.distributed_timeout_minutes);
  init.heartbeat_timeout = std::chrono::seconds(o.parallel.distributed_heartbeat_timeout);
  return dist::ProcessGroups::init(dist::rendezvous_from_env(), init);
}

void derive_batch_sizes(TrainOptions& o, int64_t dataset_size) {
  auto& d = o.data;
  const bool rl = o.batch.loss_type == LossType::kPolicyLoss;
  if (rl) {
    FURLONG_CHECK(d.rollout_batch_size && *d.rollout_batch_size > 0,
                  "--rollout-batch-size (prompts per rollout) is required for RL");
  }
  const int64_t rbs = d.rollout_batch_size.value_or(o.batch.global_batch_size.value_or(0));
  FURLONG_CHECK(rbs > 0, "set --rollout-batch-size or --global-batch-size (samples per step)");
  FURLONG_CHECK(d.n_samples_per_prompt >= 1, "--n-samples-per-prompt must be >= 1, got ",
                d.n_samples_per_prompt);
  const int64_t samples = rbs * d.n_samples_per_prompt;
  const int64_t steps = d.num_steps_per_rollout.value_or(1);
  FURLONG_CHECK(steps >= 1 && samples % steps == 0, "--num-steps-per-rollout ", steps,
                " must divide the rollout's ", samples, " samples");
  const int64_t gbs = o.batch.global_batch_size.value_or(samples / steps);
  FURLONG_CHECK(!d.num_steps_per_rollout || gbs * steps == samples, "--global-batch-size ", gbs,
                " disagrees with --num-steps-per-rollout ", steps, " (", rbs, " x ",
                d.n_samples_per_prompt, " samples = ", samples, " per rollout)");
  FURLONG_CHECK(gbs > 0 && samples % gbs == 0, "a rollout of ", samples,
                " samples (--rollout-batch-size x --n-samples-per-prompt) must be a multiple of "
                "--global-batch-size ",
                gbs);
  const int64_t num_rollout = d.num_rollout.value_or(dataset_size / rbs * d.num_epoch.value_or(1));
  if (rl) {
    FURLONG_CHECK(num_rollout >= 0, "--num-rollout must be >= 0");
  } else {
    FURLONG_CHECK(num_rollout > 0, "the run has no steps: ", dataset_size,
                  " samples with --rollout-batch-size ", rbs);
  }
  d.rollout_batch_size = rbs;
  o.derived.global_batch_size = gbs;
  o.derived.num_rollout = num_rollout;
  // The LR schedule needs a length even for a run of 0 rollouts.
  o.derived.train_iters = std::max<int64_t>(1, num_rollout * samples / gbs);
}

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

void remove_save_sentinel(const TrainOptions& o) {
  if (o.checkpoint.save_trigger_sentinel) {
    std::filesystem::remove(*o.checkpoint.save_trigger_sentinel);
  }
}

std::string metrics_path(const TrainOptions& o) {
  if (o.logging.metrics_file) return *o.logging.metrics_file;
  if (o.logging.report) return *o.logging.report + ".metrics.jsonl";
  return "";
}

std::unique_ptr<metrics::MetricsLogger> make_metrics_logger(const TrainOptions& o,
                                                            int64_t start_rollout,
                                                            bool console_table) {
  metrics::MetricsOptions mo;
  mo.jsonl_path = metrics_path(o);
  if (start_rollout == 0 && !mo.jsonl_path.empty()) std::filesystem::remove(mo.jsonl_path);
  mo.tensorboard_dir = o.logging.tensorboard_dir.value_or("");
  mo.console_table = console_table;
  return std::make_unique<metrics::MetricsLogger>(mo);
}

void finish_metrics(const TrainOptions& o, std::unique_ptr<metrics::MetricsLogger>& logger,
                    const std::string& title) {
  logger.reset();  // flush and close the JSONL first
  if (!o.logging.report) return;
  metrics::write_html_report(metrics_path(o), *o.logging.report, title);
  LOG_INFO("report: ", *o.logging.report);
}

void log_metrics(metrics::MetricsLogger& logger, int64_t step,
                 const std::map<std::string, double>& values) {
  logger.log(step, metrics::MetricValues(values.begin(), values.end()));
}

}  // namespace furlong::train
