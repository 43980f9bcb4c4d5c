// Test worker for the FSDP backend (run as N ranks through dist::launch, or alone): trains on a
// JSONL of pre-tokenized samples and dumps what the tests compare.
//
//   fsdp_worker --model DIR --data FILE --out DIR [--global-batch-size N] [--rollouts K]
//               [--dp-replicate-size R] [--no-keep-fp32-master] [--compute-dtype float32]
//               [--micro-batch-size M] [--gradient-checkpointing] [--sleep-after-first]
//               [--fsdp-cpu-offload] [--offload-train] [--calculate-per-token-loss]
//               [--balance-data]
//
// Writes, on every rank, OUT/rank-<r>.safetensors with "grad/<name>" (the last step's full
// gradients) and "param/<name>" (the full parameters after the last step), and on rank 0
// OUT/losses.json (per-step losses and grad norms) and OUT/placement.json (where the actor's
// shards and optimizer state are, and whether the model was built with CPU offload).
#include <ATen/ATen.h>

#include <cstdio>

#include "backend/fsdp_backend.h"
#include "config/flags.h"
#include "core/files.h"
#include "core/json_util.h"
#include "dist/process_group.h"
#include "io/safetensors.h"
#include "train/sft_data.h"

namespace furlong {
namespace {

struct WorkerOptions {
  backend::BackendOptions train;
  std::string data;  // JSONL of pre-tokenized samples
  std::string out;
  int64_t rollouts = 1;
  bool sleep_after_first = false;
  bool offload_train = false;  // sleep before and wake up after every rollout (miles' order)
};

// The devices the actor's shards and optimizer state live on (while awake).
Json placement(backend::FsdpBackend& backend) {
  Json devices = Json::array();
  for (auto& unit : backend.model().units()) {
    for (const auto& shard : unit->shards()) devices.push_back(shard.device().str());
  }
  Json state_devices = Json::array();
  for (const auto& [name, t] : backend.optimizer().state_dict()) {
    state_devices.push_back(t.device().str());
  }
  return {{"cpu_offload", backend.model().options().cpu_offload},
          {"shard_devices", devices},
          {"optimizer_state_devices", state_devices}};
}

int run(const std::vector<std::string>& args) {
  WorkerOptions w;
  auto& o = w.train;
  o.optimizer.lr = 1e-3;
  o.optimizer.weight_decay = 0.01;
  o.optimizer.clip_grad = 0.0;  // dumped gradients unclipped: their scale is checked too
  o.precision.compute_dtype = ComputeDtype::kFloat32;
  int64_t gbs = 8;
  config::FlagSet f("fsdp_worker");
  f.add("model", &o.model.hf_checkpoint, "model dir").required = true;
  f.add("data", &w.data, "jsonl").required = true;
  f.add("out", &w.out, "output dir").required = true;
  f.add("global-batch-size", &gbs, "samples per step");
  f.add("rollouts", &w.rollouts, "rollouts of global-batch-size samples");
  f.add("dp-replicate-size", &o.parallel.dp_replicate_size, "R");
  f.add("keep-fp32-master", &o.precision.keep_fp32_master, "master");
  f.add_enum<ComputeDtype>("compute-dtype", &o.precision.compute_dtype, compute_dtype_choices(),
                           parse_compute_dtype_choice, "dtype");
  f.add("micro-batch-size", &o.batch.micro_batch_size, "mbs");
  f.add("gradient-checkpointing", &o.model.gradient_checkpointing, "ckpt");
  f.add("sleep-after-first", &w.sleep_after_first, "sleep + wake_up after the first rollout");
  f.add("clip-grad", &o.optimizer.clip_grad, "max grad norm (0 = off)");
  f.add("fsdp-cpu-offload", &o.precision.fsdp_cpu_offload, "actor shards in host memory");
  f.add("offload-train", &w.offload_train, "sleep / wake_up around every rollout");
  f.add("calculate-per-token-loss", &o.batch.calculate_per_token_loss, "token-sum loss");
  f.add("balance-data", &o.batch.balance_data, "split by tokens over the DP ranks");
  if (!f.parse(args)) return 0;
  o.global_batch_size = gbs;
  o.train_iters = w.rollouts;
  o.batch.loss_type = backend::LossType::kSftLoss;

  auto groups = dist::ProcessGroups::init(dist::rendezvous_from_env());
  train::SftDataOptions data_options;
  data_options.path = w.data;
  auto data = train::load_sft_samples(data_options, o.model.hf_checkpoint);
  backend::FsdpBackend backend(o, *groups);
  backend.init();
  Json losses = Json::array();
  if (w.offload_train) backend.sleep();  // miles: the end of init
  for (int64_t r = 0; r < w.rollouts; ++r) {
    if (w.offload_train) backend.wake_up();
    std::vector<rl::Sample> batch(data.begin() + r * gbs, data.begin() + (r + 1) * gbs);
    for (const auto& m : backend.train(r, batch)) {
      losses.push_back({{"loss", m.values.at("loss")}, {"grad_norm", m.values.at("grad_norm")}});
    }
    if (w.offload_train) backend.sleep();
    if (w.sleep_after_first && r == 0) {
      backend.sleep();
      backend.wake_up();
    }
  }
  if (w.offload_train) backend.wake_up();
  const Json where = placement(backend);
  io::NamedTensors dump;
  backend.model().for_each_full_gradient(c10::kFloat,
                                         [&](const std::string& n, const at::Tensor& t) {
                                           dump.emplace_back("grad/" + n, t.contiguous());
                                         });
  backend.model().for_each_full_parameter(c10::kFloat,
                                          [&](const std::string& n, const at::Tensor& t) {
                                            dump.emplace_back("param/" + n, t.contiguous());
                                          });
  int rank = groups->world().rank();
  ensure_directory(w.out);
  io::save_safetensors(
      std::filesystem::path(w.out) / ("rank-" + std::to_string(rank) + ".safetensors"), dump);
  if (rank == 0) {
    write_file_atomic(std::filesystem::path(w.out) / "losses.json", losses.dump());
    write_file_atomic(std::filesystem::path(w.out) / "placement.json", where.dump());
  }
  groups->world().barrier();
  return 0;
}

}  // namespace
}  // namespace furlong

int main(int argc, char** argv) {
  try {
    return furlong::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp_worker: %s\n", e.what());
    return 1;
  }
}
