// furlong side of bench/run_all.py's FSDP benchmark: times optimizer steps of the FSDP training
// backend (SFT loss, one packed micro-batch per rank by default, clipping and AdamW included)
// on a HF model directory, run as N ranks (torchrun --no-python or `furlong launch`). Rank 0
// prints one JSON object: the median step time, tokens/s, the peak RSS of every rank (VmHWM) and
// the collective payload bytes of one step (dist::CommStats) next to the FSDP theory.
// The Python peer (bench/fsdp2_bench.py) does the same with PyTorch FSDP2 + transformers.
//
// The batch: `--docs` documents of `--doc-len` tokens per step (the global batch; rank r takes
// documents r, r+W, ...), token i of document d = (d*131 + i*31 + 7) % V, the first
// `--prompt-len` tokens the prompt and the rest the response the SFT loss covers.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "backend/fsdp_backend.h"
#include "bench_main.h"
#include "config/flags.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/json_util.h"
#include "dist/process_group.h"

namespace furlong {
namespace {

struct BenchOptions {
  std::string hf_checkpoint;
  std::string compute_dtype = "bfloat16";
  int64_t docs = 8;
  int64_t doc_len = 128;
  int64_t prompt_len = 32;
  int64_t micro_batch_size = 0;  // 0: all of a rank's documents in one micro-batch
  int64_t dp_replicate_size = 1;
  int64_t iters = 3;
  int64_t warmup = 1;
  int64_t threads = 0;
  bool keep_fp32_master = true;
  bool gradient_checkpointing = false;
  bool prefetch = true;
};

std::vector<rl::Sample> make_samples(const BenchOptions& o, int64_t vocab) {
  std::vector<rl::Sample> out;
  for (int64_t d = 0; d < o.docs; ++d) {
    rl::Sample s;
    s.index = s.group_index = d;
    for (int64_t i = 0; i < o.doc_len; ++i) s.tokens.push_back((d * 131 + i * 31 + 7) % vocab);
    s.response_length = o.doc_len - o.prompt_len;
    s.loss_mask.assign(static_cast<size_t>(s.response_length), 1.0f);
    out.push_back(std::move(s));
  }
  return out;
}

// Peak resident set size of this process in bytes (VmHWM), 0 if unreadable.
int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

Json stats_json(const dist::CommStats& s) {
  return {{"all_gather", s.bytes_all_gather},
          {"reduce_scatter", s.bytes_reduce_scatter},
          {"all_reduce", s.bytes_all_reduce},
          {"broadcast", s.bytes_broadcast},
          {"calls", s.calls}};
}

dist::CommStats& operator+=(dist::CommStats& a, const dist::CommStats& b) {
  a.bytes_all_gather += b.bytes_all_gather;
  a.bytes_reduce_scatter += b.bytes_reduce_scatter;
  a.bytes_all_reduce += b.bytes_all_reduce;
  a.bytes_broadcast += b.bytes_broadcast;
  a.calls += b.calls;
  return a;
}

int run(const std::vector<std::string>& args) {
  BenchOptions o;
  config::FlagSet flags("furlong_fsdp_bench");
  flags.add("hf-checkpoint", &o.hf_checkpoint, "model directory").required = true;
  flags.add("dtype", &o.compute_dtype, "compute dtype: bfloat16 or float32");
  flags.add("docs", &o.docs, "documents per step (global batch)");
  flags.add("doc-len", &o.doc_len, "tokens per document");
  flags.add("prompt-len", &o.prompt_len, "prompt tokens per document (no loss)");
  flags.add("micro-batch-size", &o.micro_batch_size, "documents per micro-batch (0 = all)");
  flags.add("dp-replicate-size", &o.dp_replicate_size, "R");
  flags.add("iters", &o.iters, "timed steps");
  flags.add("warmup", &o.warmup, "untimed steps");
  flags.add("threads", &o.threads, "intra-op threads per rank (0 = default)");
  flags.add("keep-fp32-master", &o.keep_fp32_master, "fp32 master weights");
  flags.add("gradient-checkpointing", &o.gradient_checkpointing, "activation checkpointing");
  flags.add("fsdp-prefetch", &o.prefetch, "prefetch the next unit's all-gather");
  if (!flags.parse(args)) return 0;
  FURLONG_CHECK(o.prompt_len >= 1 && o.prompt_len < o.doc_len,
                "--prompt-len must be in [1, --doc-len)");
  if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));

  auto groups = dist::ProcessGroups::init(dist::rendezvous_from_env());
  const int world = groups->world().size();
  FURLONG_CHECK(o.docs % world == 0, "--docs ", o.docs, " must be a multiple of the world size ",
                world);
  backend::BackendOptions t;
  t.model.hf_checkpoint = o.hf_checkpoint;
  t.model.gradient_checkpointing = o.gradient_checkpointing;
  t.parallel.dp_replicate_size = o.dp_replicate_size;
  t.parallel.fsdp_prefetch = o.prefetch;
  t.precision.compute_dtype =
      parse_compute_dtype_choice(dtype_name(parse_dtype(o.compute_dtype, "--dtype")));
  t.precision.keep_fp32_master = o.keep_fp32_master;
  t.optimizer.lr = 1e-5;
  t.batch.loss_type = backend::LossType::kSftLoss;
  t.batch.micro_batch_size = o.micro_batch_size > 0 ? o.micro_batch_size : o.docs / world;
  t.global_batch_size = o.docs;
  t.train_iters = o.warmup + o.iters;

  backend::FsdpBackend backend(t, *groups);
  backend.init();
  auto samples = make_samples(o, backend.model().model().config().vocab_size);
  auto& mesh = backend.mesh();
  std::vector<dist::Group*> mesh_groups = {&mesh.dp_shard(), &mesh.dp_replicate(), &mesh.dp()};

  std::vector<double> times;
  dist::CommStats shard_step, replicate_step, world_step;
  for (int64_t i = 0; i < o.warmup + o.iters; ++i) {
    for (auto* g : mesh_groups) g->reset_comm_stats();
    groups->world().barrier();  // steps start together: a rank's time is not another's lag
    auto start = std::chrono::steady_clock::now();
    backend.train(i, samples);
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    // Counted in this thread before anything else is issued; world's barrier counts one call.
    shard_step = mesh.dp_shard().comm_stats();
    replicate_step = mesh.dp_replicate().comm_stats();
    world_step = mesh.dp().comm_stats();
  }
  std::vector<double> timed(times.begin() + o.warmup, times.end());
  std::sort(timed.begin(), timed.end());
  const double median = timed[timed.size() / 2];

  // Peak RSS of every rank, gathered to all (rank 0 prints).
  auto mine = at::tensor({peak_rss_bytes()}, at::kLong);
  auto all = at::empty({world}, at::kLong);
  groups->world().all_gather(all, mine);
  std::vector<int64_t> rss(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + world);

  // The FSDP theory per step and micro-batch: all-gather every parameter for forward and again
  // for backward in the compute dtype, reduce-scatter every gradient in fp32.
  const int64_t params = backend.model().model().num_parameters();
  const int64_t compute_bytes =
      static_cast<int64_t>(c10::elementSize(parse_dtype(o.compute_dtype, "--dtype")));
  const int64_t micro_batches = o.docs / world / *t.batch.micro_batch_size;
  const int64_t theory = micro_batches * params * (2 * compute_bytes + 4);
  dist::CommStats fsdp = shard_step;
  fsdp += replicate_step;

  if (groups->world().rank() == 0) {
    const int64_t tokens = o.docs * o.doc_len;
    Json out = {{"impl", "furlong"},
                {"host_memory", configure_host_memory().describe()},
                {"dtype", o.compute_dtype},
                {"ranks", world},
                {"threads", at::get_num_threads()},
                {"tokens", tokens},
                {"micro_batches_per_rank", micro_batches},
                {"seconds", timed},
                {"median_s", median},
                {"tokens_per_s", static_cast<double>(tokens) / median},
                {"peak_rss_bytes", *std::max_element(rss.begin(), rss.end())},
                {"peak_rss_per_rank", rss},
                {"params", params},
                {"comm_bytes_per_step",
                 {{"dp_shard", stats_json(shard_step)},
                  {"dp_replicate", stats_json(replicate_step)},
                  {"world", stats_json(world_step)},
                  {"fsdp_total",
                   fsdp.bytes_all_gather + fsdp.bytes_reduce_scatter + fsdp.bytes_all_reduce}}},
                {"theory_bytes_per_step", theory}};
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  groups->world().barrier();
  return 0;
}

}  // namespace
}  // namespace furlong

int main(int argc, char** argv) {
  return furlong::bench_main("furlong_fsdp_bench", argc, argv, &furlong::run);
}
