#include "train/rl_trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "backend/backend.h"
#include "core/files.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "data/prompt_dataset.h"
#include "engine/routed_experts_codec.h"
#include "metrics/metrics.h"
#include "metrics/rollout_progress.h"
#include "metrics/run_report.h"
#include "reward/rewards.h"
#include "rl/advantages.h"
#include "rollout/background_rollout.h"
#include "rollout/engine_layout.h"
#include "rollout/rollout_collector.h"
#include "rollout/rollout_engines.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/driver.h"

namespace furlong::train {
namespace {

using backend::StepMetrics;
using backend::TrainBackend;
using rollout::BackgroundRollout;
using rollout::EvalWhen;
using rollout::RewardFn;
using rollout::RolloutCollector;
using rollout::RolloutEngines;
using rollout::RolloutResult;
using Metrics = std::map<std::string, double>;

data::PromptDataOptions prompt_options(const TrainOptions& o, const std::string& path,
                                       bool shuffle) {
  data::PromptDataOptions p;
  p.path = path;
  p.input_key = o.data.input_key;
  p.label_key = o.data.label_key;
  p.metadata_key = o.rollout.metadata_key;
  p.tool_key = o.data.tool_key;
  p.apply_chat_template = o.data.apply_chat_template;
  p.apply_chat_template_kwargs = chat_template_kwargs(o.data);
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
  Json j = {{"i", s.index},           {"g", s.group_index},  {"t", s.tokens},
            {"r", s.response_length}, {"m", s.loss_mask},    {"lp", s.rollout_log_probs},
            {"rw", s.reward},         {"raw", s.raw_reward}, {"s", static_cast<int>(s.status)},
            {"rm", s.remove}};
  if (!s.weight_versions.empty()) j["wv"] = s.weight_versions;
  // R3: the engine's expert ids, every row (the last one's -1 too), as base64 of the int32s.
  if (const auto& r = s.routed_experts; !r.empty()) {
    j["re"] = {{"layers", r.num_layers},
               {"top_k", r.top_k},
               {"ids", engine::base64_encode(r.ids.data(), r.ids.size() * sizeof(int32_t))}};
  }
  return j;
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
  if (j.contains("wv")) s.weight_versions = j["wv"].get<std::vector<int64_t>>();
  if (j.contains("re")) {
    const auto& r = j["re"];
    s.routed_experts.num_layers = r["layers"].get<int64_t>();
    s.routed_experts.top_k = r["top_k"].get<int64_t>();
    const auto bytes = engine::base64_decode(r["ids"].get<std::string>(), "routed experts");
    s.routed_experts.ids.resize(bytes.size() / sizeof(int32_t));
    std::memcpy(s.routed_experts.ids.data(), bytes.data(), bytes.size());
  }
  return s;
}

// A sample with the rollout-side fields too (prompt, response, label, metadata): what
// --save-debug-rollout-data and the partial-rollout buffer in a checkpoint hold.
Json sample_to_full_json(const rl::Sample& s) {
  auto j = sample_to_json(s);
  j["label"] = s.label;
  j["metadata"] = s.metadata;
  j["prompt"] = s.prompt;
  j["response"] = s.response;
  return j;
}

rl::Sample sample_from_full_json(const Json& j) {
  auto s = sample_from_json(j);
  s.label = j.value("label", std::string());
  s.metadata = j.value("metadata", Json::object());
  s.prompt = j.value("prompt", Json());
  s.response = j.value("response", std::string());
  return s;
}

// --save-debug-rollout-data: one rollout's samples as JSON (the training fields plus the
// prompt, response, label and metadata), read back by load_debug_rollout.
void save_debug_rollout(const TrainOptions& o, int64_t rollout_id,
                        const std::vector<rl::Sample>& samples) {
  Json all = Json::array();
  for (const auto& s : samples) all.push_back(sample_to_full_json(s));
  const auto path = format_debug_rollout_path(*o.debug.save_debug_rollout_data, rollout_id);
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  // Strings from outside (env answers, data rows) are made valid UTF-8 where they enter; the
  // replacing dump keeps any that slipped through from ending the run here.
  write_file_atomic(path, Json{{"rollout_id", rollout_id}, {"samples", all}}.dump(
                              -1, ' ', false, Json::error_handler_t::replace));
  LOG_INFO("rollout ", rollout_id, ": ", samples.size(), " samples saved to ", path,
           " (--save-debug-rollout-data)");
}

std::vector<rl::Sample> load_debug_rollout(const TrainOptions& o, int64_t rollout_id) {
  const auto path = format_debug_rollout_path(*o.debug.load_debug_rollout_data, rollout_id);
  FURLONG_CHECK(std::filesystem::exists(path), "--load-debug-rollout-data: ", path, " (rollout ",
                rollout_id, ") does not exist");
  Json doc;
  try {
    doc = Json::parse(read_file(path));
  } catch (const std::exception& e) {
    FURLONG_FAIL("--load-debug-rollout-data: ", path, " is not a saved rollout: ", e.what());
  }
  FURLONG_CHECK(doc.is_object() && doc.contains("samples") && doc["samples"].is_array(),
                "--load-debug-rollout-data: ", path,
                " has no \"samples\" list (write it with --save-debug-rollout-data)");
  std::vector<rl::Sample> samples;
  for (const auto& j : doc["samples"]) {
    try {
      samples.push_back(sample_from_full_json(j));
    } catch (const Json::exception& e) {
      FURLONG_FAIL("--load-debug-rollout-data: ", path, ": sample ", samples.size(),
                   " is malformed: ", e.what());
    }
    rl::validate_sample(samples.back(), path + " sample " + std::to_string(samples.size() - 1));
  }
  return samples;
}

// --rm-type / --rm-url: grades samples in place (remote failures after retries are counted in
// metadata["reward_error"] and score 0; the collector reports them). The built-in graders read
// the responses without `tokenizer`'s special tokens.
RewardFn make_reward_fn(const TrainOptions& o, const tokenizer::Tokenizer& tokenizer) {
  reward::RewardOptions ro;
  ro.rm_type = o.rollout.rm_type;
  if (!ro.rm_type && o.rollout.rm_url) ro.rm_type = reward::RewardType{reward::RewardKind::kRemote};
  ro.reward_key = o.rollout.reward_key.value_or("");
  ro.special_tokens = reward::special_token_strings(tokenizer);
  ro.remote.url = o.rollout.rm_url.value_or("");
  ro.remote.timeout_s = o.rollout.rm_timeout_seconds;
  ro.remote.max_retries = static_cast<int>(o.rollout.rm_max_retries);
  ro.fail_on_remote_error = false;
  auto model = std::make_shared<reward::RewardGrader>(ro);
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

// Rank 0's side of the loop: data, generation, grading, eval and metrics.
struct Driver {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatFormatter> chat;
  std::unique_ptr<data::PromptDataset> dataset;
  std::unique_ptr<data::RolloutDataSource> source;
  std::unique_ptr<RolloutCollector> collector;
  std::vector<RolloutCollector::EvalSet> evals;
  std::unique_ptr<metrics::MetricsLogger> logger;
  // The data position (data source and partial-rollout buffer) right after the last rollout
  // handed to training: what a checkpoint of that rollout saves (with --train-async the next
  // rollout has already taken its prompts when the save runs).
  Json position;
};

// --partial-rollout: the buffered groups as lists of full samples.
Json buffer_state(const data::RolloutBuffer& buffer) {
  Json groups = Json::array();
  for (const auto& group : buffer.groups()) {
    Json g = Json::array();
    for (const auto& s : group) g.push_back(sample_to_full_json(s));
    groups.push_back(std::move(g));
  }
  return groups;
}

void restore_buffer(data::RolloutBuffer* buffer, const Json& groups) {
  if (groups.empty()) return;
  if (buffer == nullptr) {
    LOG_INFO("the checkpoint holds ", groups.size(),
             " partial-rollout group(s); this run has no --partial-rollout, so they are dropped");
    return;
  }
  std::vector<data::SampleGroup> restored;
  for (const auto& g : groups) {
    restored.emplace_back();
    for (const auto& j : g) {
      restored.back().push_back(sample_from_full_json(j));
      rl::validate_sample(restored.back().back(), "checkpoint partial-rollout buffer");
    }
  }
  buffer->restore(std::move(restored));
  LOG_INFO("partial rollouts: ", buffer->size(), " buffered group(s) restored from the checkpoint");
}

// The driver's data position now (see Driver::position).
Json data_position(Driver& d) {
  Json position = {{"data_source", d.source->state()}};
  if (d.collector && d.collector->partial_buffer()) {
    position["partial_rollout_buffer"] = buffer_state(*d.collector->partial_buffer());
  }
  return position;
}

// One RL job on this rank, built in place by start_rl_run (its parts keep references to
// `options` and to each other, so it never moves); run_rl drives it.
struct RlRun {
  RlRun() = default;
  RlRun(const RlRun&) = delete;
  RlRun& operator=(const RlRun&) = delete;

  TrainOptions options;
  std::unique_ptr<dist::ProcessGroups> groups;
  std::unique_ptr<TrainBackend> backend;
  std::unique_ptr<RolloutEngines> engines;
  Driver driver;                // filled on rank 0 only (the tokenizer and dataset on every rank)
  int64_t start = 0;            // first rollout (after a resume: the next one)
  int64_t stop = 0;             // one past the last rollout
  int64_t synced_bytes = 0;     // of the last weight sync
  double synced_seconds = 0.0;  // of the last weight sync

  dist::Group& world() { return groups->world(); }
  bool root() { return world().rank() == 0; }
  bool colocated() const { return options.rollout.colocate; }
  bool training() const { return !options.debug.debug_rollout_only; }
  bool generating() const { return !options.debug.debug_train_only; }
  ResolvedOffload offload;
};

// The debug switches' rules (before anything loads), and one line for each offload flag that
// frees no device memory on this machine.
void check_debug_and_offload(RlRun& run) {
  const auto& d = run.options.debug;
  FURLONG_CHECK(!(d.debug_rollout_only && d.debug_train_only),
                "--debug-rollout-only and --debug-train-only exclude each other");
  FURLONG_CHECK(!d.debug_train_only || d.load_debug_rollout_data,
                "--debug-train-only starts no engines, so it needs --load-debug-rollout-data "
                "(rollouts saved by an earlier run with --save-debug-rollout-data)");
  FURLONG_CHECK(!(d.debug_rollout_only && d.load_debug_rollout_data),
                "--debug-rollout-only with --load-debug-rollout-data would neither generate nor "
                "train; drop one of them");
  if (d.debug_train_only && run.options.eval.eval_interval && run.root()) {
    LOG_INFO("--debug-train-only starts no engines, so --eval-interval evaluates nothing");
  }
  run.offload = resolve_offload(run.options);
  if (run.offload.rollout && !run.options.rollout.colocate && run.root()) {
    LOG_INFO(
        "--offload-rollout: furlong's engine servers keep their memory between rollouts "
        "(they run on their own devices); only colocated engines release it");
  }
  const bool any = run.offload.train || run.offload.rollout;
  if (any && run.root() && run.groups->device().is_cpu()) {
    LOG_INFO("offload (train ", run.offload.train ? "on" : "off", ", rollout ",
             run.offload.rollout ? "on" : "off",
             "): the trainer and engine run on the CPU, so there is no device memory to free; "
             "the same steps run (weights and optimizer state stay in host memory)");
  }
}

void load_prompts(RlRun& run) {
  const auto& o = run.options;
  auto& d = run.driver;
  const auto& hf = o.model.hf_checkpoint;
  d.tokenizer = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_directory(hf));
  // Message-list prompts need the template even without --apply-chat-template (miles).
  try {
    d.chat = o.data.chat_template_path
                 ? std::make_unique<tokenizer::ChatFormatter>(hf, *o.data.chat_template_path)
                 : std::make_unique<tokenizer::ChatFormatter>(hf);
  } catch (const Error&) {
    if (o.data.chat_template_path) throw;
    d.chat = nullptr;  // no template: prompts that need one fail with the dataset's message
  }
  d.dataset = std::make_unique<data::PromptDataset>(
      prompt_options(o, o.data.prompt_data, o.data.rollout_shuffle), *d.tokenizer, d.chat.get());
}

// Rank 0: the data source (at the resumed position), the collector, eval sets and metrics.
void start_driver(RlRun& run) {
  const auto& o = run.options;
  auto& d = run.driver;
  d.source = std::make_unique<data::RolloutDataSource>(*d.dataset, o.data.n_samples_per_prompt);
  auto state = run.backend ? run.backend->loaded_driver_state() : Json::object();
  if (state.contains("data_source")) d.source->load_state(state["data_source"]);
  d.logger = make_metrics_logger(o, run.start, /*console_table=*/true);
  if (!run.engines) {  // --debug-train-only: rollouts come from files
    d.position = data_position(d);
    return;
  }
  d.collector = std::make_unique<RolloutCollector>(rollout_config(o), *run.engines, *d.source,
                                                   *d.tokenizer, make_reward_fn(o, *d.tokenizer));
  restore_buffer(d.collector->partial_buffer(),
                 state.value("partial_rollout_buffer", Json::array()));
  d.position = data_position(d);
  for (const auto& [name, path] : eval_sets(o.eval.eval_prompt_data)) {
    d.evals.push_back({name, std::make_unique<data::PromptDataset>(prompt_options(o, path, false),
                                                                   *d.tokenizer, d.chat.get())});
  }
  LOG_INFO("rollout engines: ", run.engines->describe());
}

void start_rl_run(RlRun& run, TrainOptions options) {
  run.options = std::move(options);
  auto& o = run.options;
  run.groups = init_process_groups(o);
  validate_options(o, run.world().size());
  FURLONG_CHECK(!o.data.prompt_data.empty(), "--prompt-data is required (a JSONL prompt file)");
  validate_rl_options(o);
  rollout::validate_engine_layout(o.rollout, run.world().size());
  check_debug_and_offload(run);
  load_prompts(run);
  derive_batch_sizes(o, run.driver.dataset->size());
  if (run.root()) {
    LOG_INFO("RL on ", run.driver.dataset->size(), " prompts: ", o.derived.num_rollout,
             " rollouts of ", *o.data.rollout_batch_size, " prompts x ",
             o.data.n_samples_per_prompt, " samples, global batch ", o.derived.global_batch_size,
             ", ", o.derived.train_iters, " optimizer steps, ", run.world().size(), " rank(s), ",
             o.rollout.colocate ? "colocated" : "disaggregated");
  }
  if (run.training()) {
    run.backend = backend::make_backend(backend_options(o), *run.groups);
    run.start = run.backend->init();
  }
  run.stop = o.rollout.debug_exit_after_rollout
                 ? std::min(o.derived.num_rollout, run.start + *o.rollout.debug_exit_after_rollout)
                 : o.derived.num_rollout;
  const int rank = run.world().rank();
  if (run.generating()) {
    run.engines = o.rollout.colocate
                      ? rollout::make_colocated_engines(rollout_config(o), *run.groups)
                      : rollout::make_remote_engines(rollout_config(o), rank);
  }
  if (run.root()) start_driver(run);
}

// Collective: the engines get the trainer's weights as version `version`.
void sync_weights(RlRun& run, int64_t version) {
  if (!run.backend || !run.engines) return;  // debug modes: nothing to send, or no one to
  Stopwatch watch;
  auto& backend = *run.backend;
  run.synced_bytes =
      run.engines->sync_weights([&](const WeightSink& sink) { backend.update_weights(sink); },
                                version, run.options.rollout.check_weight_update_equal);
  run.synced_seconds = watch.seconds();
  if (run.root() && run.driver.collector) run.driver.collector->set_engine_weight_version(version);
}

bool eval_due(RlRun& run, int64_t rollout_id, bool baseline) {
  const auto& e = run.options.eval;
  if (!e.eval_interval || !run.engines) return false;
  if (baseline) return rollout_id == run.start && !e.skip_eval_before_train;
  return (rollout_id + 1) % *e.eval_interval == 0;
}

void maybe_eval(RlRun& run, int64_t rollout_id, bool baseline, Metrics& m) {
  if (!eval_due(run, rollout_id, baseline)) return;
  run.engines->generation_phase(run.root(), [&] {  // every rank: colocated engines serve
    const EvalWhen when{.step = rollout_id, .before_training = baseline};
    for (const auto& [k, v] : run.driver.collector->evaluate(run.driver.evals, when)) m[k] = v;
  });
}

// Rank 0 generates and grades the rollout; every rank then holds the same samples.
// --load-debug-rollout-data replaces generation by the saved samples of `rollout_id`;
// --save-debug-rollout-data writes what was used.
// Rank 0, once rollout `rollout_id` is collected: its metrics, how old its tokens' weights are
// against the weights that train on it (version rollout_id: the trainer has made rollout_id
// updates), the data position a checkpoint of this rollout saves, and the debug dump.
void take_rollout(RlRun& run, int64_t rollout_id, RolloutResult&& result,
                  std::vector<rl::Sample>& samples, Metrics& m) {
  samples = std::move(result.samples);
  for (const auto& [k, v] : result.metrics) m[k] = v;
  double lag_sum = 0, lag_count = 0, lag_max = 0;
  for (const auto& s : samples) {
    for (int64_t v : s.weight_versions) {
      const auto lag = static_cast<double>(rollout_id - v);
      lag_sum += lag;
      lag_count += 1;
      lag_max = std::max(lag_max, lag);
    }
  }
  if (lag_count > 0 && run.backend) {  // --debug-rollout-only trains nothing
    m["train/staleness_mean"] = lag_sum / lag_count;
    m["train/staleness_max"] = lag_max;
  }
  if (run.driver.source) run.driver.position = data_position(run.driver);
}

std::vector<rl::Sample> collect_rollout(RlRun& run, int64_t rollout_id, Metrics& m) {
  std::vector<rl::Sample> samples;
  const auto& debug = run.options.debug;
  if (run.root() && debug.load_debug_rollout_data) {
    samples = load_debug_rollout(run.options, rollout_id);
  } else if (!debug.load_debug_rollout_data && run.engines) {
    run.engines->generation_phase(run.root(), [&] {  // every rank: colocated engines serve
      take_rollout(run, rollout_id, run.driver.collector->collect(rollout_id), samples, m);
    });
  }
  if (run.root() && debug.save_debug_rollout_data)
    save_debug_rollout(run.options, rollout_id, samples);
  broadcast_samples(samples, run.world());
  return samples;
}

// The backend's optimizer steps on the rollout (advantages, losses, updates), timed.
std::vector<StepMetrics> train_on(RlRun& run, int64_t rollout_id,
                                  const std::vector<rl::Sample>& samples, Metrics& m) {
  ScopedTimer timer(m, "perf/train_time");
  if (!run.backend) return {};  // --debug-rollout-only
  return run.backend->train(rollout_id, samples);
}

void maybe_save(RlRun& run, int64_t rollout_id, Metrics& m) {
  if (!run.backend || !save_due(run.options, rollout_id, run.world())) return;
  ScopedTimer timer(m, "perf/save_model_time");
  Json state = Json::object();
  if (run.root()) state = run.driver.position;
  run.backend->save_model(rollout_id, state);
  if (run.root()) remove_save_sentinel(run.options);
}

// miles' order after training: with --offload-train the trainer offloads, with
// --offload-rollout the engine takes its memory back, then the weights move (the trainer
// wakes first here: gathering needs its shards).
void hand_memory_to_engine(RlRun& run, Metrics& m) {
  const bool train = run.offload.train && run.backend;
  if (train) {
    ScopedTimer timer(m, "perf/sleep_time");
    run.backend->sleep();
  }
  if (run.offload.rollout && run.engines) run.engines->resume_memory();
  if (train) {
    ScopedTimer timer(m, "perf/wake_up_time");
    run.backend->wake_up();
  }
}

// The train/* row of one optimizer step under miles' names (train/<name>), with its
// train/step = rollout_id * steps + index (miles' step counter). Scoped names (rollout/...,
// perf/...) go to the rollout's row `rollout_row` instead.
Metrics train_row(const StepMetrics& step, int64_t train_step, Metrics& rollout_row) {
  Metrics row;
  for (const auto& [k, v] : step.values) {
    if (k.find('/') != std::string::npos) {
      rollout_row[k] = v;
    } else {
      row["train/" + k] = v;
    }
  }
  if (row.count("train/entropy_loss")) row["train/entropy"] = row["train/entropy_loss"];
  row["train/step"] = static_cast<double>(train_step);
  return row;
}

// Every optimizer step's train/* metrics at its own train/step (miles), then the rollout's row
// (rollout/*, perf/*, eval/*) at rollout_id. With one step per rollout the two steps coincide
// and one row carries both. Then the rollout's progress line.
void log_rollout(RlRun& run, int64_t rollout_id, const std::vector<StepMetrics>& steps, Metrics& m,
                 metrics::RolloutProgress& progress) {
  if (!run.root()) return;
  const auto per_rollout = static_cast<int64_t>(steps.size());
  std::vector<Metrics> rows;
  for (int64_t j = 0; j < per_rollout; ++j) {
    rows.push_back(train_row(steps[static_cast<size_t>(j)], rollout_id * per_rollout + j, m));
  }
  // The synchronous loop's step is generation then training; --train-async measures its own
  // (the wall time of the iteration, generation overlapping training).
  if (!m.count("perf/step_time"))
    m["perf/step_time"] = m["perf/rollout_time"] + m["perf/train_time"];
  m["rollout/step"] = static_cast<double>(rollout_id);
  if (per_rollout == 1) {
    m.insert(rows.front().begin(), rows.front().end());
    rows.clear();
  }
  for (const auto& row : rows) {
    log_metrics(*run.driver.logger, static_cast<int64_t>(row.at("train/step")), row);
  }
  log_metrics(*run.driver.logger, rollout_id, m);
  LOG_INFO(progress.line(rollout_id, m));
}

// miles' train.py: generate, train, save, sync, eval, one after the other.
void run_sync_loop(RlRun& run) {
  metrics::RolloutProgress progress(run.start, run.stop);
  for (int64_t rollout_id = run.start; rollout_id < run.stop; ++rollout_id) {
    Metrics m;
    Stopwatch iteration;
    maybe_eval(run, rollout_id, /*baseline=*/true, m);  // logged with this rollout's row
    auto samples = collect_rollout(run, rollout_id, m);
    if (run.offload.rollout && run.engines) run.engines->release_memory();
    auto steps = train_on(run, rollout_id, samples, m);
    m["perf/update_weights_time"] = run.synced_seconds;  // the previous sync (miles)
    m["perf/update_weights_bytes"] = static_cast<double>(run.synced_bytes);
    maybe_save(run, rollout_id, m);
    hand_memory_to_engine(run, m);
    sync_weights(run, rollout_id + 1);
    maybe_eval(run, rollout_id, /*baseline=*/false, m);
    m["perf/iteration_time"] = iteration.seconds();
    log_rollout(run, rollout_id, steps, m, progress);
  }
}

// --train-async: the rollout's samples on every rank. Rank 0 takes them from the background
// collection (waiting for it if it is still generating) or from `ready` (joined earlier, before
// a weight sync or an eval).
std::vector<rl::Sample> take_async_rollout(RlRun& run, int64_t rollout_id, BackgroundRollout& bg,
                                           std::optional<RolloutResult>& ready, Metrics& m) {
  std::vector<rl::Sample> samples;
  if (run.root()) {
    double waited = 0;
    if (!ready) {
      FURLONG_ASSERT(bg.pending() && bg.rollout_id() == rollout_id, "internal: rollout ",
                     rollout_id, " was not started");
      ready = bg.join(&waited);
    }
    m["perf/wait_rollout_time"] = waited;
    take_rollout(run, rollout_id, std::move(*ready), samples, m);
    ready.reset();
    if (run.options.debug.save_debug_rollout_data)
      save_debug_rollout(run.options, rollout_id, samples);
  }
  broadcast_samples(samples, run.world());
  return samples;
}

// Rank 0: rollout `rollout_id` starts generating in the background with the engines' current
// weights.
void start_async_rollout(RlRun& run, int64_t rollout_id, BackgroundRollout& bg) {
  if (!run.root() || rollout_id >= run.stop) return;
  auto* collector = run.driver.collector.get();
  bg.start(rollout_id, [collector, rollout_id] { return collector->collect(rollout_id); });
}

// Rank 0: the background rollout, if any, is finished and kept in `ready` (the engines must be
// idle for a weight sync or an eval).
void finish_async_rollout(RlRun& run, BackgroundRollout& bg, std::optional<RolloutResult>& ready,
                          Metrics& m) {
  if (!run.root() || !bg.pending()) return;
  double waited = 0;
  ready = bg.join(&waited);
  m["perf/wait_rollout_time"] += waited;
}

// miles' train_async.py (one step off policy): rollout k+1 generates on the engine servers
// while every rank trains on rollout k. Every --update-weights-interval rollouts the trainer
// waits for the generation in flight, then sends the new weights, so no sync happens mid-
// generation and a rollout's tokens come from weights at most that many updates old.
void run_async_loop(RlRun& run) {
  const int64_t interval = run.options.rollout.update_weights_interval;
  BackgroundRollout bg;
  std::optional<RolloutResult> ready;  // rank 0: a joined rollout not yet trained on
  Metrics baseline;                    // logged with the first rollout's row
  metrics::RolloutProgress progress(run.start, run.stop);
  if (run.start < run.stop) maybe_eval(run, run.start, /*baseline=*/true, baseline);
  start_async_rollout(run, run.start, bg);
  for (int64_t rollout_id = run.start; rollout_id < run.stop; ++rollout_id) {
    Metrics m = std::exchange(baseline, {});
    Stopwatch iteration;
    auto samples = take_async_rollout(run, rollout_id, bg, ready, m);
    start_async_rollout(run, rollout_id + 1, bg);  // generates while this one trains
    auto steps = train_on(run, rollout_id, samples, m);
    m["perf/update_weights_time"] = run.synced_seconds;  // the previous sync (miles)
    m["perf/update_weights_bytes"] = static_cast<double>(run.synced_bytes);
    maybe_save(run, rollout_id, m);
    if ((rollout_id + 1) % interval == 0) {
      finish_async_rollout(run, bg, ready, m);
      sync_weights(run, rollout_id + 1);
    }
    if (eval_due(run, rollout_id, /*baseline=*/false)) finish_async_rollout(run, bg, ready, m);
    maybe_eval(run, rollout_id, /*baseline=*/false, m);
    m["perf/iteration_time"] = iteration.seconds();
    m["perf/step_time"] = m["perf/iteration_time"];
    log_rollout(run, rollout_id, steps, m, progress);
  }
}

// The architecture config.json names ("architectures"[0], else model_type).
std::string model_architecture(const std::string& hf_dir) {
  try {
    const auto config = read_json_file(std::filesystem::path(hf_dir) / "config.json");
    const auto archs = config.value("architectures", Json::array());
    if (archs.is_array() && !archs.empty() && archs[0].is_string()) {
      return archs[0].get<std::string>();
    }
    return config.value("model_type", std::string("unknown"));
  } catch (const std::exception&) {
    return "unknown";  // the header only describes the run; the model loaded already
  }
}

// The report's run header: the model, the task and the flags that shape the run.
OrderedJson run_info_fields(RlRun& run) {
  const auto& o = run.options;
  OrderedJson f = OrderedJson::object();
  f["model"] = o.model.hf_checkpoint;
  f["architecture"] = model_architecture(o.model.hf_checkpoint);
  f["--prompt-data"] =
      o.data.prompt_data + " (" + std::to_string(run.driver.dataset->size()) + " prompts)";
  f["--input-key / --label-key"] = o.data.input_key + " / " + o.data.label_key;
  if (o.rollout.rm_type) f["--rm-type"] = reward::reward_type_name(*o.rollout.rm_type);
  if (o.rollout.rm_url) f["--rm-url"] = *o.rollout.rm_url;
  if (!o.eval.eval_prompt_data.empty()) {
    f["--eval-prompt-data"] = join(o.eval.eval_prompt_data, " ");
    f["--eval-interval"] = o.eval.eval_interval.value_or(0);
  }
  f["--advantage-estimator"] = rl::advantage_estimator_name(o.algorithm.advantage_estimator);
  f["--num-rollout"] = o.derived.num_rollout;
  f["--rollout-batch-size"] = o.data.rollout_batch_size.value_or(0);
  f["--n-samples-per-prompt"] = o.data.n_samples_per_prompt;
  f["--global-batch-size"] = o.derived.global_batch_size;
  f["--lr"] = o.optimizer.lr;
  f["compute dtype"] =
      trainer_compute_dtype_name(o.precision, run.groups->device().is_cpu() ? "cpu" : "cuda");
  f["--rollout-max-response-len"] = o.rollout.rollout_max_response_len;
  f["--rollout-temperature"] = o.rollout.rollout_temperature;
  if (o.algorithm.use_kl_loss) f["--kl-loss-coef"] = o.algorithm.kl_loss_coef;
  f["layout"] = std::to_string(run.world().size()) + " rank(s), " +
                (o.rollout.colocate ? "colocated" : "disaggregated") +
                (o.rollout.train_async ? ", --train-async" : "");
  if (run.start > 0) f["resumed at rollout"] = run.start;
  return f;
}

// Rank 0, --report: the run header beside the metrics JSONL; its total time adds this
// process's `seconds` to what an earlier (resumed-from) process recorded there.
void write_run_header(RlRun& run, double seconds) {
  if (!run.options.logging.report) return;
  const auto path = metrics_path(run.options);
  const double earlier = run.start > 0 ? metrics::read_run_wall_seconds(path) : 0.0;
  metrics::write_run_info(path, run_info_fields(run), earlier + seconds);
}

}  // namespace

int run_rl(TrainOptions options) {
  Stopwatch wall;  // the report's total time
  RlRun run;
  start_rl_run(run, std::move(options));
  sync_weights(run, run.start);  // engines never serve the raw --hf-checkpoint weights (miles)
  if (run.options.rollout.train_async) {
    if (run.root()) {
      LOG_INFO(
          "--train-async: rollout k+1 generates while rollout k trains; weights go to the "
          "engines every ",
          run.options.rollout.update_weights_interval, " rollout(s)");
    }
    run_async_loop(run);
  } else {
    run_sync_loop(run);
  }
  if (run.root()) {
    write_run_header(run, wall.seconds());
    finish_metrics(run.options, run.driver.logger, "furlong RL run");
  }
  run.world().barrier();
  return 0;
}

}  // namespace furlong::train
