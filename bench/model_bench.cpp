// furlong side of bench/run_all.py's model benchmark: times a training step (forward +
// backward of the mean next-token loss over packed documents) or a scoring pass (log-probs and
// entropies of every token) on a HF model directory, and prints one JSON object.
// The Python peer (bench/hf_model_bench.py) does the same with transformers.
#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "bench_main.h"
#include "config/flags.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/json_util.h"
#include "models/hf_model.h"
#include "models/logprobs.h"

namespace furlong {
namespace {

struct BenchOptions {
  std::string hf_checkpoint;
  std::string mode = "train";
  std::string dtype = "float32";
  int64_t docs = 8;
  int64_t doc_len = 128;
  int64_t iters = 3;
  int64_t warmup = 1;
  int64_t threads = 0;
  std::string device = "cpu";
};

// Waits for the device's queued work, so that a step's wall time covers its kernels.
void sync(c10::Device device) {
  if (!device.is_cpu()) at::accelerator::synchronizeDevice(device.index());
}

// Deterministic token ids shared with the Python peer: doc d, position i -> (d*131 + i*31 + 7) % V.
models::PackedBatch make_batch(int64_t docs, int64_t len, int64_t vocab) {
  std::vector<std::vector<int64_t>> ids(docs, std::vector<int64_t>(len));
  for (int64_t d = 0; d < docs; ++d)
    for (int64_t i = 0; i < len; ++i) ids[d][i] = (d * 131 + i * 31 + 7) % vocab;
  return models::PackedBatch::from_documents(ids);
}

// Rows t whose next token is in the same document, and those next tokens.
std::pair<at::Tensor, at::Tensor> next_token_rows(int64_t docs, int64_t len,
                                                  const at::Tensor& tokens) {
  std::vector<int64_t> rows;
  for (int64_t d = 0; d < docs; ++d)
    for (int64_t i = 0; i + 1 < len; ++i) rows.push_back(d * len + i);
  auto rows_T = at::tensor(rows, at::kLong);
  return {rows_T, tokens.index_select(0, rows_T + 1)};
}

double train_step(models::CausalLM& model, const models::PackedBatch& batch, const at::Tensor& rows,
                  const at::Tensor& targets) {
  sync(model.weights()[0][0].device());
  auto start = std::chrono::steady_clock::now();
  for (auto& unit : model.weights())
    for (auto& w : unit) w.mutable_grad() = at::Tensor();
  auto hidden = model.forward_hidden(batch);
  const auto& w = model.weights();
  auto lp = models::token_logprobs(hidden.index_select(0, rows),
                                   model.head_weight(w[0], w[model.final_unit()]), targets,
                                   {.with_entropy = false});
  auto loss = -lp.logprobs_T.mean();
  loss.backward();
  sync(loss.device());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double score_step(models::CausalLM& model, const models::PackedBatch& batch, const at::Tensor& rows,
                  const at::Tensor& targets) {
  c10::InferenceMode inference;
  auto start = std::chrono::steady_clock::now();
  auto hidden = model.forward_hidden(batch);
  const auto& w = model.weights();
  auto lp = models::token_logprobs(hidden.index_select(0, rows),
                                   model.head_weight(w[0], w[model.final_unit()]), targets);
  (void)lp.entropy_T.sum().item<float>();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run(const std::vector<std::string>& args) {
  BenchOptions o;
  config::FlagSet flags("furlong_model_bench");
  flags.add("hf-checkpoint", &o.hf_checkpoint, "model directory").required = true;
  flags.add("mode", &o.mode, "train or score").choices = {"train", "score"};
  flags.add("dtype", &o.dtype, "float32 or bfloat16");
  flags.add("docs", &o.docs, "documents per batch");
  flags.add("doc-len", &o.doc_len, "tokens per document");
  flags.add("iters", &o.iters, "timed iterations");
  flags.add("warmup", &o.warmup, "untimed iterations");
  flags.add("threads", &o.threads, "intra-op threads (0 = default)");
  flags.add("device", &o.device, "cpu or cuda[:i]");
  if (!flags.parse(args)) return 0;
  if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));
  const c10::Device device(o.device);
  auto model = models::load_hf_model(o.hf_checkpoint,
                                     {.dtype = parse_dtype(o.dtype, "--dtype"), .device = device});
  auto batch = make_batch(o.docs, o.doc_len, model->config().vocab_size);
  auto [rows, targets] = next_token_rows(o.docs, o.doc_len, batch.tokens_P);
  batch = batch.to(device);
  rows = rows.to(device);
  targets = targets.to(device);
  if (o.mode == "train") model->set_requires_grad(true);
  std::vector<double> times;
  for (int64_t i = 0; i < o.warmup + o.iters; ++i) {
    double t = o.mode == "train" ? train_step(*model, batch, rows, targets)
                                 : score_step(*model, batch, rows, targets);
    if (i >= o.warmup) times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  Json out = {{"impl", "furlong"},
              {"host_memory", configure_host_memory().describe()},
              {"mode", o.mode},
              {"dtype", o.dtype},
              {"device", device.str()},
              {"tokens", o.docs * o.doc_len},
              {"threads", at::get_num_threads()},
              {"seconds", times},
              {"median_s", median},
              {"tokens_per_s", static_cast<double>(o.docs * o.doc_len) / median}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace furlong

int main(int argc, char** argv) {
  return furlong::bench_main("furlong_model_bench", argc, argv, &furlong::run);
}
