#include "train/rl_trainer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/html_report.h"
#include "core/log.h"
#include "core/metrics.h"
#include "rl/advantages.h"
#include "rl/losses.h"
#include "rollout/dynamic_filter.h"
#include "rollout/prompt_dataset.h"
#include "rollout/rewards.h"
#include "rollout/sample_builder.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/backend.h"
#include "train/rollout_collector.h"
#include "train/rollout_engines.h"
#include "train/sft_trainer.h"

namespace furlong::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// miles' derived batch sizes (spec 2.2) for an RL run over `num_prompts` prompts.
void derive_rl(TrainOptions& o, int64_t num_prompts) {
  auto& d = o.data;
  FURLONG_CHECK(d.rollout_batch_size && *d.rollout_batch_size > 0,
                "--rollout-batch-size (prompts per rollout) is required for RL");
  FURLONG_CHECK(d.n_samples_per_prompt >= 1, "--n-samples-per-prompt must be >= 1, got ",
                d.n_samples_per_prompt);
  const int64_t rbs = *d.rollout_batch_size;
  const int64_t samples = rbs * d.n_samples_per_prompt;
  const int64_t steps = d.num_steps_per_rollout.value_or(1);
  FURLONG_CHECK(steps >= 1 && samples % steps == 0, "--num-steps-per-rollout ", steps,
                " must divide the rollout's ", samples, " samples");
  const int64_t gbs = o.batch.global_batch_size.value_or(samples / steps);
  FURLONG_CHECK(!d.num_steps_per_rollout || gbs * steps == samples, "--global-batch-size ", gbs,
                " disagrees with --num-steps-per-rollout ", steps, " (", rbs, " prompts x ",
                d.n_samples_per_prompt, " samples = ", samples, ")");
  FURLONG_CHECK(gbs > 0 && samples % gbs == 0,
                "--rollout-batch-size x --n-samples-per-prompt = ", samples,
                " must be a multiple of --global-batch-size ", gbs);
  const int64_t num_rollout = d.num_rollout.value_or(num_prompts / rbs * d.num_epoch.value_or(1));
  FURLONG_CHECK(num_rollout >= 0, "--num-rollout must be >= 0");
  o.derived.global_batch_size = gbs;
  o.derived.num_rollout = num_rollout;
  o.derived.train_iters = std::max<int64_t>(1, num_rollout * samples / gbs);
}

// Rules of the RL flags (miles' appendix); errors say what to change.
void validate_rl(const TrainOptions& o) {
  const auto& a = o.algorithm;
  const auto& r = o.rollout;
  FURLONG_CHECK(!(a.use_rollout_logprobs && a.use_tis),
                "--use-rollout-logprobs and --use-tis cannot be combined (TIS corrects the "
                "rollout log-probs against the trainer's; pick one)");
  FURLONG_CHECK(a.kl_coef == 0.0 || a.kl_loss_coef == 0.0,
                "--kl-coef and --kl-loss-coef cannot both be non-zero");
  rl::validate_advantage_options({.estimator = rl::parse_advantage_estimator(a.advantage_estimator),
                                  .kl_coef = a.kl_coef,
                                  .kl_type = rl::parse_kl_type(a.kl_loss_type),
                                  .gamma = a.gamma,
                                  .normalize_advantages = a.normalize_advantages});
  rl::validate_loss_options({.eps_clip = a.eps_clip,
                             .eps_clip_high = a.eps_clip_high,
                             .eps_clip_c = a.eps_clip_c,
                             .tis_clip = a.tis_clip,
                             .tis_clip_low = a.tis_clip_low,
                             .entropy_coef = a.entropy_coef,
                             .kl_loss_coef = a.kl_loss_coef});
  FURLONG_CHECK(!r.rm_type.empty() || r.rm_url,
                "RL needs a reward: set --rm-type (math, deepscaler, dapo, f1, exact_match) or "
                "--rm-url");
  FURLONG_CHECK(!o.eval.eval_interval || !o.eval.eval_prompt_data.empty(),
                "--eval-interval needs --eval-prompt-data");
  FURLONG_CHECK(!(r.colocate && !r.rollout_engine_urls.empty()),
                "--colocate runs the engine in the training processes; drop "
                "--rollout-engine-urls (or --colocate for disaggregated engines)");
  FURLONG_CHECK(r.rollout_temperature >= 0.0, "--rollout-temperature must be >= 0");
  FURLONG_CHECK(r.rollout_max_response_len >= 1, "--rollout-max-response-len must be >= 1");
  rollout::resolve_over_sampling_batch_size(*o.data.rollout_batch_size, r.over_sampling_batch_size);
  FURLONG_CHECK(o.batch.loss_type == "policy_loss", "internal: run_rl with --loss-type ",
                o.batch.loss_type);
}

rollout::PromptDataOptions prompt_options(const TrainOptions& o, const std::string& path,
                                          bool shuffle) {
  rollout::PromptDataOptions p;
  p.path = path;
  p.input_key = o.data.input_key;
  p.label_key = o.data.label_key;
  p.metadata_key = o.rollout.metadata_key;
  p.apply_chat_template = o.data.apply_chat_template;
  p.max_prompt_len = o.rollout.rollout_max_prompt_len;
  p.shuffle = shuffle;
  p.seed = static_cast<uint64_t>(o.data.rollout_seed);
  return p;
}

// --eval-prompt-data: PATH (named after the file) or NAME PATH [NAME PATH ...].
std::vector<std::pair<std::string, std::string>> eval_sets(const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> sets;
  if (args.size() == 1) {
    sets.emplace_back(std::filesystem::path(args[0]).stem().string(), args[0]);
    return sets;
  }
  FURLONG_CHECK(args.size() % 2 == 0, "--eval-prompt-data takes PATH or NAME PATH pairs, got ",
                args.size(), " values");
  for (size_t i = 0; i < args.size(); i += 2) sets.emplace_back(args[i], args[i + 1]);
  return sets;
}

Json sample_to_json(const rl::Sample& s) {
  return {{"i", s.index},           {"g", s.group_index},  {"t", s.tokens},
          {"r", s.response_length}, {"m", s.loss_mask},    {"lp", s.rollout_log_probs},
          {"rw", s.reward},         {"raw", s.raw_reward}, {"s", static_cast<int>(s.status)},
          {"rm", s.remove}};
}

rl::Sample sample_from_json(const Json& j) {
  rl::Sample s;
  s.index = j["i"].get<int64_t>();
  s.group_index = j["g"].get<int64_t>();
  s.tokens = j["t"].get<std::vector<int64_t>>();
  s.response_length = j["r"].get<int64_t>();
  s.loss_mask = j["m"].get<std::vector<float>>();
  s.rollout_log_probs = j["lp"].get<std::vector<float>>();
  s.reward = j["rw"].get<double>();
  s.raw_reward = j["raw"].get<double>();
  s.status = static_cast<rl::SampleStatus>(j["s"].get<int>());
  s.remove = j["rm"].get<bool>();
  return s;
}

// --rm-type / --rm-url: grades samples in place (remote failures after retries are counted in
// metadata["reward_error"] and score 0; the collector reports them).
RewardFn make_reward_fn(const TrainOptions& o) {
  rollout::RewardOptions ro;
  ro.rm_type = o.rollout.rm_type.empty() && o.rollout.rm_url ? "remote_rm" : o.rollout.rm_type;
  ro.reward_key = o.rollout.reward_key.value_or("");
  ro.remote.url = o.rollout.rm_url.value_or("");
  ro.remote.timeout_s = o.rollout.rm_timeout_seconds;
  ro.remote.max_retries = static_cast<int>(o.rollout.rm_max_retries);
  ro.fail_on_remote_error = false;
  auto model = std::make_shared<rollout::RewardModel>(ro);
  return [model](std::vector<rl::Sample*>& samples) { model->compute_rewards(samples); };
}

}  // namespace

void broadcast_samples(std::vector<rl::Sample>& samples, dist::Group& group, int root) {
  if (group.size() == 1) return;
  std::string bytes;
  if (group.rank() == root) {
    Json all = Json::array();
    for (const auto& s : samples) all.push_back(sample_to_json(s));
    bytes = all.dump();
  }
  auto size = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
  group.broadcast(size, root);
  auto buffer = at::empty({size.item<int64_t>()}, at::kByte);
  if (group.rank() == root) std::memcpy(buffer.data_ptr(), bytes.data(), bytes.size());
  group.broadcast(buffer, root);
  if (group.rank() == root) return;
  auto all = Json::parse(std::string(static_cast<const char*>(buffer.data_ptr()),
                                     static_cast<size_t>(buffer.numel())));
  samples.clear();
  for (const auto& j : all) samples.push_back(sample_from_json(j));
}

namespace {

// Everything rank 0 holds for generation and logging.
struct Driver {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatFormatter> chat;
  std::unique_ptr<rollout::PromptDataset> dataset;
  std::unique_ptr<rollout::RolloutDataSource> source;
  std::unique_ptr<RolloutCollector> collector;
  std::vector<RolloutCollector::EvalSet> evals;
  std::unique_ptr<MetricsLogger> logger;
};

// The JSONL the metrics go to: --metrics-file, else next to --report (the report reads it).
std::string metrics_path(const TrainOptions& o) {
  if (o.logging.metrics_file) return *o.logging.metrics_file;
  if (o.logging.report) return *o.logging.report + ".metrics.jsonl";
  return "";
}

void log_metrics(Driver& d, int64_t step, const std::map<std::string, double>& values) {
  if (!d.logger) return;
  std::vector<std::pair<std::string, double>> ordered(values.begin(), values.end());
  d.logger->log(step, ordered);
}

}  // namespace

int run_rl(TrainOptions o) {
  dist::InitOptions init;
  init.backend = dist::parse_backend(o.parallel.distributed_backend, "--distributed-backend");
  init.timeout = std::chrono::minutes(o.parallel.distributed_timeout_minutes);
  auto groups = dist::ProcessGroups::init(dist::rendezvous_from_env(), init);
  auto& world = groups->world();
  const bool root = world.rank() == 0;
  validate_options(o, world.size());
  FURLONG_CHECK(!o.data.prompt_data.empty(), "--prompt-data is required (a JSONL prompt file)");
  validate_rl(o);

  Driver d;
  const auto& hf = o.model.hf_checkpoint;
  d.tokenizer = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_directory(hf));
  // Message-list prompts need the template even without --apply-chat-template (miles).
  try {
    d.chat = std::make_unique<tokenizer::ChatFormatter>(hf);
  } catch (const Error&) {
    d.chat = nullptr;  // no template: prompts that need one fail with the dataset's message
  }
  d.dataset = std::make_unique<rollout::PromptDataset>(
      prompt_options(o, o.data.prompt_data, o.data.rollout_shuffle), *d.tokenizer, d.chat.get());
  derive_rl(o, d.dataset->size());
  if (root) {
    LOG_INFO("RL on ", d.dataset->size(), " prompts: ", o.derived.num_rollout, " rollouts of ",
             *o.data.rollout_batch_size, " prompts x ", o.data.n_samples_per_prompt,
             " samples, global batch ", o.derived.global_batch_size, ", ", o.derived.train_iters,
             " optimizer steps, ", world.size(), " rank(s), ",
             o.rollout.colocate ? "colocated" : "disaggregated");
  }
  auto backend = make_backend(o, *groups);
  const int64_t start = backend->init();
  auto engines = o.rollout.colocate ? make_colocated_engines(o, world.rank())
                                    : make_remote_engines(o, world.rank());
  if (root) {
    d.source =
        std::make_unique<rollout::RolloutDataSource>(*d.dataset, o.data.n_samples_per_prompt);
    auto state = backend->loaded_driver_state();
    if (state.contains("data_source")) d.source->load_state(state["data_source"]);
    d.collector =
        std::make_unique<RolloutCollector>(o, *engines, *d.source, *d.tokenizer, make_reward_fn(o));
    for (const auto& [name, path] : eval_sets(o.eval.eval_prompt_data)) {
      d.evals.push_back({name, std::make_unique<rollout::PromptDataset>(
                                   prompt_options(o, path, false), *d.tokenizer, d.chat.get())});
    }
    MetricsOptions mo;
    mo.jsonl_path = metrics_path(o);
    // A fresh run starts a fresh file; a resumed one appends (the curve continues).
    if (start == 0 && !mo.jsonl_path.empty()) std::filesystem::remove(mo.jsonl_path);
    mo.tensorboard_dir = o.logging.tensorboard_dir.value_or("");
    d.logger = std::make_unique<MetricsLogger>(mo);
    LOG_INFO("rollout engines: ", engines->describe());
  }

  // Startup weight sync: engines never serve the raw --hf-checkpoint weights (miles 1.1.4).
  auto t_sync = Clock::now();
  int64_t update_weights_bytes =
      engines->sync_weights(*backend, start, o.rollout.check_weight_update_equal);
  double update_weights_time = seconds_since(t_sync);
  const bool eval_on = o.eval.eval_interval.has_value();
  const int64_t stop =
      o.rollout.debug_exit_after_rollout
          ? std::min(o.derived.num_rollout, start + *o.rollout.debug_exit_after_rollout)
          : o.derived.num_rollout;
  for (int64_t rollout_id = start; rollout_id < stop; ++rollout_id) {
    std::map<std::string, double> m;
    if (root && rollout_id == start && eval_on && !o.eval.skip_eval_before_train) {
      m = d.collector->evaluate(d.evals);  // the baseline, logged with this rollout's row
    }
    std::vector<rl::Sample> samples;
    if (root) {
      auto result = d.collector->collect(rollout_id);
      samples = std::move(result.samples);
      for (auto& [k, v] : result.metrics) m[k] = v;
    }
    broadcast_samples(samples, world);
    if (o.rollout.colocate) engines->release_memory();
    auto t_train = Clock::now();
    auto steps = backend->train(rollout_id, samples);
    m["perf/train_time"] = seconds_since(t_train);
    m["perf/update_weights_time"] = update_weights_time;  // the previous sync (miles)
    m["perf/update_weights_bytes"] = static_cast<double>(update_weights_bytes);
    if (save_due(o, rollout_id, world)) {
      auto t_save = Clock::now();
      Json state = Json::object();
      if (root) state["data_source"] = d.source->state();
      backend->save_model(rollout_id, state);
      m["perf/save_model_time"] = seconds_since(t_save);
      if (root && o.checkpoint.save_trigger_sentinel) {
        std::filesystem::remove(*o.checkpoint.save_trigger_sentinel);
      }
    }
    if (o.rollout.colocate) {
      // miles' colocated order: the trainer offloads, the engine takes its memory back, then the
      // weights move (here the trainer wakes first: gathering needs its shards on the device).
      auto t = Clock::now();
      backend->sleep();
      m["perf/sleep_time"] = seconds_since(t);
      engines->resume_memory();
      t = Clock::now();
      backend->wake_up();
      m["perf/wake_up_time"] = seconds_since(t);
    }
    t_sync = Clock::now();
    update_weights_bytes =
        engines->sync_weights(*backend, rollout_id + 1, o.rollout.check_weight_update_equal);
    update_weights_time = seconds_since(t_sync);
    if (root && eval_on && (rollout_id + 1) % *o.eval.eval_interval == 0) {
      for (const auto& [k, v] : d.collector->evaluate(d.evals)) m[k] = v;
    }
    if (root) {
      for (const auto& step : steps) {
        for (const auto& [k, v] : step.values) {
          const bool scoped = k.find('/') != std::string::npos;
          m[scoped ? k : "train/" + k] = v;
        }
      }
      if (m.count("train/entropy_loss")) m["train/entropy"] = m["train/entropy_loss"];
      m["perf/step_time"] = m["perf/rollout_time"] + m["perf/train_time"];
      log_metrics(d, rollout_id, m);
    }
  }
  if (root && o.logging.report) {
    d.logger.reset();  // flush and close the JSONL first
    write_html_report(metrics_path(o), *o.logging.report, "furlong RL run");
    LOG_INFO("report: ", *o.logging.report);
  }
  world.barrier();
  return 0;
}

}  // namespace furlong::train
