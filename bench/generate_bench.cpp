// C++ side of bench/generate_bench.py: batched generation with furlong's rollout engine.
// Submits `batch` requests at once (prompts of `prompt-len` deterministic tokens, sampling at
// the given temperature, ignore eos, `max-new-tokens` each), and prints one JSON object: wall
// time, output tokens/s, and time to first token (submit -> the first token of every request,
// i.e. the batch's prefill latency; mean and max over requests). With --runs N > 1 the figures
// are those of the median run (by wall time), and every run's output tokens/s is listed.
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "bench_main.h"
#include "config/flags.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/json_util.h"
#include "engine/engine.h"
#include "models/causal_lm.h"

namespace furlong {
namespace {

struct BenchOptions {
  std::string hf_checkpoint;
  std::string dtype = "float32";
  int64_t batch = 8;
  int64_t prompt_len = 32;
  int64_t max_new_tokens = 32;
  double temperature = 1.0;
  int64_t threads = 0;
  int64_t warmup = 1;
  int64_t runs = 1;
  bool exact_logprobs = false;  // the engine's default
  int64_t n_samples = 1;        // requests per distinct prompt (GRPO's n)
  bool prefix_sharing = true;   // the engine's default
  std::string device = "cpu";
  std::string prepack_weights = "auto";  // the engine's default
};

struct RunResult {
  double seconds = 0;
  int64_t output_tokens = 0;
  std::vector<double> ttft;
};

RunResult run_once(engine::Engine& eng, const BenchOptions& o, int64_t vocab) {
  using Clock = std::chrono::steady_clock;
  std::mutex mu;
  std::condition_variable cv;
  RunResult r;
  r.ttft.assign(o.batch, -1.0);
  int64_t done = 0;
  auto start = Clock::now();
  for (int64_t b = 0; b < o.batch; ++b) {
    engine::GenerateRequest req;
    for (int64_t i = 0; i < o.prompt_len; ++i)
      req.input_ids.push_back((b / o.n_samples * 131 + i * 31 + 7) % vocab);
    req.sampling.temperature = o.temperature;
    req.sampling.max_new_tokens = o.max_new_tokens;
    req.sampling.ignore_eos = true;
    req.sampling.seed = static_cast<uint64_t>(b);
    eng.submit(
        std::move(req),
        [&](engine::RequestId, engine::GenerateOutput out) {
          std::lock_guard<std::mutex> lock(mu);
          r.output_tokens += static_cast<int64_t>(out.output_ids.size());
          ++done;
          cv.notify_all();
        },
        [&, b](engine::RequestId, const std::vector<int64_t>&, const std::vector<float>&) {
          if (r.ttft[b] < 0) {
            r.ttft[b] = std::chrono::duration<double>(Clock::now() - start).count();
          }
        });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == o.batch; });
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

int run(const std::vector<std::string>& args) {
  BenchOptions o;
  config::FlagSet flags("furlong_generate_bench");
  flags.add("hf-checkpoint", &o.hf_checkpoint, "model directory").required = true;
  flags.add("dtype", &o.dtype, "float32 or bfloat16");
  flags.add("batch", &o.batch, "requests submitted together");
  flags.add("prompt-len", &o.prompt_len, "prompt tokens per request");
  flags.add("max-new-tokens", &o.max_new_tokens, "generated tokens per request");
  flags.add("temperature", &o.temperature, "sampling temperature (0 = greedy)");
  flags.add("threads", &o.threads, "intra-op threads (0 = default)");
  flags.add("warmup", &o.warmup, "untimed runs first");
  flags.add("runs", &o.runs, "timed runs (the median run is reported)");
  flags.add("exact-logprobs", &o.exact_logprobs, "engine option exact_logprobs");
  flags.add("n-samples", &o.n_samples,
            "consecutive requests with the same prompt (GRPO's n; seeds differ)");
  flags.add("prefix-sharing", &o.prefix_sharing,
            "engine option prefix_sharing (same-prompt requests share one prefill)");
  flags.add("device", &o.device, "engine option device: cpu or cuda[:i]");
  flags.add("prepack-weights", &o.prepack_weights, "engine option prepack_weights: auto, on, off");
  if (!flags.parse(args)) return 0;
  FURLONG_CHECK(o.n_samples >= 1, "--n-samples must be >= 1");
  FURLONG_CHECK(o.runs >= 1, "--runs must be >= 1");
  engine::EngineOptions eo;
  eo.dtype = o.dtype;
  eo.device = o.device;
  eo.num_threads = o.threads;
  eo.exact_logprobs = o.exact_logprobs;
  eo.prefix_sharing = o.prefix_sharing;
  eo.prepack_weights = engine::parse_prepack_weights(o.prepack_weights);
  eo.max_total_tokens = std::max<int64_t>(65536, o.batch * (o.prompt_len + o.max_new_tokens));
  auto eng = engine::Engine::load(o.hf_checkpoint, eo);
  const int64_t vocab = eng->model().config().vocab_size;
  for (int64_t i = 0; i < o.warmup; ++i) run_once(*eng, o, vocab);
  const int64_t shared_before = eng->model_info()["prefix_shared_tokens"].get<int64_t>();
  std::vector<RunResult> runs;
  for (int64_t i = 0; i < o.runs; ++i) runs.push_back(run_once(*eng, o, vocab));
  const int64_t shared =
      (eng->model_info()["prefix_shared_tokens"].get<int64_t>() - shared_before) / o.runs;
  Json rates = Json::array();
  for (const auto& run : runs) {
    rates.push_back(static_cast<double>(run.output_tokens) / run.seconds);
  }
  std::sort(runs.begin(), runs.end(),
            [](const RunResult& a, const RunResult& b) { return a.seconds < b.seconds; });
  const RunResult& r = runs[runs.size() / 2];
  double ttft_mean = 0, ttft_max = 0;
  for (double t : r.ttft) {
    ttft_mean += t / static_cast<double>(r.ttft.size());
    ttft_max = std::max(ttft_max, t);
  }
  Json out = {{"impl", "furlong"},
              {"host_memory", configure_host_memory().describe()},
              {"batch", o.batch},
              {"prompt_len", o.prompt_len},
              {"max_new_tokens", o.max_new_tokens},
              {"dtype", o.dtype},
              {"device", o.device},
              {"threads", at::get_num_threads()},
              {"exact_logprobs", o.exact_logprobs},
              {"n_samples", o.n_samples},
              {"prefix_sharing", o.prefix_sharing},
              {"prepack_weights", o.prepack_weights},
              {"packed_weight_bytes", eng->model_info()["packed_weight_bytes"]},
              {"prefill_tokens", o.batch * o.prompt_len - shared},
              {"prefill_tokens_saved", shared},
              {"seconds", r.seconds},
              {"output_tokens", r.output_tokens},
              {"output_tokens_per_s", static_cast<double>(r.output_tokens) / r.seconds},
              {"ttft_mean_s", ttft_mean},
              {"ttft_max_s", ttft_max},
              {"runs", o.runs},
              {"runs_output_tokens_per_s", rates}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace furlong

int main(int argc, char** argv) {
  return furlong::bench_main("furlong_generate_bench", argc, argv, &furlong::run);
}
