// Test worker for routing replay in the FSDP backend (run as N ranks through dist::launch, or
// alone). Two tasks:
//
//   moe_replay_worker --task replay --model DIR --routing-model DIR --out DIR [--replay r3|r2]
//       [--micro-batch-size M] [--global-batch-size G] [--samples N] [--gradient-checkpointing]
//       [--moe-aux-loss-coeff C] [--ci-test]
//     Synthetic samples; with r3 their routed_experts come from a record forward of
//     --routing-model (standing in for the engine). Trains one rollout of --model on them and
//     writes OUT/rank-<r>.json: per pass (log_probs, train_forward, train_backward) the rows
//     (token x MoE layer) compared with the routing that should be replayed and how many
//     differed, how many rows --model's free routing would route differently, the step
//     metrics, and (rank 0) the load-balancing loss of one packed forward of all samples.
//
//   moe_replay_worker --task dlogp --model DIR --out DIR [--samples N]
//     The engine (bf16, recording its routing) generates N samples; the trainer (bf16, one rank)
//     recomputes their log-probs with and without R3. Writes OUT/dlogp.json: mean / max
//     |trainer - engine| log-prob per mode, and how many token x layer rows the trainer's free
//     routing chose differently from the engine.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <random>

#include "backend/fsdp_backend.h"
#include "config/flags.h"
#include "core/files.h"
#include "core/json_util.h"
#include "dist/process_group.h"
#include "engine/engine.h"
#include "models/hf_model.h"

namespace furlong {
namespace {

struct Args {
  std::string task = "replay", model, routing_model, out, replay = "r3";
  int64_t micro_batch_size = 2, global_batch_size = 8, samples = 16;
  bool gradient_checkpointing = false, ci_test = false;
  double aux_coeff = 0.0;
};

// Per-sample routing of `model`'s free forward, int64 [T, L, K] (-1 in dense layers).
at::Tensor free_routing_TLK(const models::CausalLM& model, const std::vector<int64_t>& tokens) {
  auto trace = std::make_shared<models::MoeTrace>();
  trace->record = true;
  at::NoGradGuard no_grad;
  model.forward_hidden(models::PackedBatch::from_documents({tokens}), {.moe = trace});
  return trace->recorded_PLK(model.num_layers(), model.config().moe.experts_per_token);
}

// Synthetic GRPO samples: groups of 4, varied prompt / response lengths, two reward levels.
std::vector<rl::Sample> make_samples(int64_t n, int64_t vocab) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1), prompt(3, 7), response(2, 6);
  std::vector<rl::Sample> out;
  for (int64_t i = 0; i < n; ++i) {
    rl::Sample s;
    s.index = i;
    s.group_index = i / 4;
    for (int64_t k = prompt(rng) + (s.response_length = response(rng)); k > 0; --k) {
      s.tokens.push_back(token(rng));
    }
    s.loss_mask.assign(s.response_length, 1.0f);
    s.raw_reward = s.reward = (i % 3 == 0) ? 1.0 : 0.0;
    out.push_back(std::move(s));
  }
  return out;
}

RoutedExperts to_routed_experts(const at::Tensor& ids_TLK) {
  auto ids = ids_TLK.to(at::kInt).contiguous().clone();
  ids[ids.size(0) - 1].fill_(-1);  // the last token never ran in the engine
  RoutedExperts r{.num_layers = ids.size(1), .top_k = ids.size(2), .ids = {}};
  r.ids.assign(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
  return r;
}

// Rows (token x MoE layer) of `got` vs `want` where want is not -1, and how many differ.
std::pair<int64_t, int64_t> compare_rows(const at::Tensor& got_TLK, const at::Tensor& want_TLK) {
  auto valid_TL = (want_TLK >= 0).all(-1);
  auto differ_TL = (got_TLK != want_TLK).any(-1) & valid_TL;
  return {valid_TL.sum().item<int64_t>(), differ_TL.sum().item<int64_t>()};
}

backend::BackendOptions train_options(const Args& a) {
  backend::BackendOptions o;
  o.model.hf_checkpoint = a.model;
  o.model.gradient_checkpointing = a.gradient_checkpointing;
  o.optimizer.lr = 1e-2;
  o.precision.compute_dtype = a.task == "dlogp" ? ComputeDtype::kBfloat16 : ComputeDtype::kFloat32;
  o.batch.loss_type = backend::LossType::kPolicyLoss;
  o.batch.micro_batch_size = a.micro_batch_size;
  o.n_samples_per_prompt = 4;
  o.global_batch_size = a.global_batch_size;
  o.train_iters = a.samples / a.global_batch_size;
  o.moe.use_rollout_routing_replay = a.replay == "r3";
  o.moe.use_routing_replay = a.replay == "r3" || a.replay == "r2";
  o.moe.moe_aux_loss_coeff = a.aux_coeff;
  o.ci_test = a.ci_test;
  // Whole samples in every mode: the free-routing passes here are compared per sample row with
  // an engine that records routing (and so packs whole sequences too); sharing is off under
  // replay anyway (FsdpBackend::share_prompts).
  o.batch.pack_shared_prompts = false;
  return o;
}

int run_replay(const Args& a, dist::ProcessGroups& groups) {
  auto model = models::load_hf_model(a.model);
  auto samples = make_samples(a.samples, model->config().vocab_size);
  int64_t free_rows = 0, free_differ = 0;
  std::vector<at::Tensor> want(samples.size());  // what each sample's training must replay
  if (a.replay == "r3" && model->config().moe.enabled()) {
    auto routing_model = models::load_hf_model(a.routing_model);
    for (size_t i = 0; i < samples.size(); ++i) {
      samples[i].routed_experts =
          to_routed_experts(free_routing_TLK(*routing_model, samples[i].tokens));
      want[i] = backend::rollout_routing_TLK(samples[i], model->num_layers(),
                                             model->config().moe.experts_per_token);
      auto [rows, differ] = compare_rows(free_routing_TLK(*model, samples[i].tokens), want[i]);
      free_rows += rows;
      free_differ += differ;
    }
  }
  backend::FsdpBackend backend(train_options(a), groups);
  backend.init();
  std::map<std::string, std::pair<int64_t, int64_t>> passes;  // pass -> (rows, differing)
  const auto& c = model->config();
  backend.set_moe_observer([&](const std::string& pass, const std::vector<size_t>& items,
                               const models::MoeTrace& trace) {
    if (items.empty()) return;
    auto got_PLK = trace.recorded_PLK(c.num_hidden_layers, c.moe.experts_per_token).cpu();
    // Local index -> sample: rank r holds samples r, r + W, ... (no --balance-data).
    std::vector<size_t> global;
    std::vector<int64_t> sizes;
    for (size_t i : items) {
      global.push_back(i * groups.world().size() + groups.world().rank());
      sizes.push_back(static_cast<int64_t>(samples[global.back()].tokens.size()));
    }
    auto pieces = got_PLK.split_with_sizes(sizes);
    for (size_t k = 0; k < items.size(); ++k) {
      const size_t i = global[k];
      if (a.replay == "r2" && pass == "log_probs") want[i] = pieces[k].clone();
      if (!want[i].defined()) continue;
      auto [rows, differ] = compare_rows(pieces[k], want[i]);
      passes[pass].first += rows;
      passes[pass].second += differ;
    }
  });
  Json steps = Json::array();
  for (const auto& m : backend.train(0, samples)) steps.push_back(m.values);
  Json result{{"free_rows", free_rows}, {"free_differ", free_differ}, {"steps", steps}};
  for (const auto& [pass, v] : passes)
    result["passes"][pass] = {{"rows", v.first}, {"differ", v.second}};
  if (groups.world().rank() == 0) {
    // The load-balancing loss of one free forward of all samples packed (the trainer's first
    // step sees exactly this when one micro-batch holds them all).
    std::vector<std::vector<int64_t>> docs;
    for (const auto& s : samples) docs.push_back(s.tokens);
    auto trace = std::make_shared<models::MoeTrace>();
    trace->collect_router_probs = true;
    at::NoGradGuard no_grad;
    model->forward_hidden(models::PackedBatch::from_documents(docs), {.moe = trace});
    result["lb_loss_all_samples"] =
        models::load_balancing_loss(*trace, c.moe.num_experts, c.moe.experts_per_token)
            .item<double>();
  }
  ensure_directory(a.out);
  write_file_atomic(
      std::filesystem::path(a.out) / ("rank-" + std::to_string(groups.world().rank()) + ".json"),
      result.dump());
  groups.world().barrier();
  return 0;
}

// The engine's rollouts: N sampled continuations of random prompts (the same tokens whatever
// the options: seeded, and recording does not change the decode computation), with their
// routing when `with_routing` (an exact-logprobs engine then recomputes with those experts).
std::vector<rl::Sample> engine_samples(const Args& a, bool exact_logprobs, bool with_routing) {
  engine::EngineOptions eo;
  eo.dtype = "bfloat16";
  eo.record_routed_experts = true;
  eo.exact_logprobs = exact_logprobs;
  eo.pack_shared_prompts = false;  // as the trainer here
  eo.num_threads = 1;
  eo.decode_log_interval = 0;
  auto engine = engine::Engine::load(a.model, eo);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> token(0, engine->model().config().vocab_size - 1),
      prompt(4, 10);
  std::vector<engine::GenerateRequest> requests;
  for (int64_t i = 0; i < a.samples; ++i) {
    engine::GenerateRequest r;
    for (int64_t k = prompt(rng); k > 0; --k) r.input_ids.push_back(token(rng));
    r.sampling.max_new_tokens = 12;
    r.sampling.ignore_eos = true;
    r.sampling.seed = static_cast<uint64_t>(100 + i);
    r.return_routed_experts = with_routing;
    requests.push_back(std::move(r));
  }
  auto outputs = engine->generate(requests);
  std::vector<rl::Sample> samples;
  for (size_t i = 0; i < outputs.size(); ++i) {
    rl::Sample s;
    s.index = static_cast<int64_t>(i);
    s.tokens = requests[i].input_ids;
    s.tokens.insert(s.tokens.end(), outputs[i].output_ids.begin(), outputs[i].output_ids.end());
    s.response_length = static_cast<int64_t>(outputs[i].output_ids.size());
    s.loss_mask.assign(s.response_length, 1.0f);
    s.rollout_log_probs = outputs[i].output_logprobs;
    s.routed_experts = outputs[i].routed_experts;
    samples.push_back(std::move(s));
  }
  return samples;
}

int run_dlogp(Args a, dist::ProcessGroups& groups) {
  Json table = Json::object();
  for (bool exact : {false, true}) {
    for (const char* mode : {"none", "r3"}) {
      // Decode-time log-probs do not depend on the routing request, so "none" keeps the ids
      // there to count the trainer's flips; with exact log-probs, as in training, only R3 asks.
      const bool r3 = std::string(mode) == "r3";
      auto samples = engine_samples(a, exact, r3 || !exact);
      a.replay = mode;
      backend::FsdpBackend backend(train_options(a), groups);
      backend.init();
      int64_t rows = 0, differ = 0;
      const auto& c = backend.model().model().config();
      backend.set_moe_observer(
          [&](const std::string&, const std::vector<size_t>& items, const models::MoeTrace& trace) {
            if (items.empty() || r3 || samples[items[0]].routed_experts.empty()) return;
            auto got = trace.recorded_PLK(c.num_hidden_layers, c.moe.experts_per_token).cpu();
            std::vector<int64_t> sizes;
            for (size_t i : items) sizes.push_back(static_cast<int64_t>(samples[i].tokens.size()));
            auto pieces = got.split_with_sizes(sizes);
            for (size_t k = 0; k < items.size(); ++k) {
              auto want = backend::rollout_routing_TLK(samples[items[k]], c.num_hidden_layers,
                                                       c.moe.experts_per_token);
              auto [r, d] = compare_rows(pieces[k], want);
              rows += r;
              differ += d;
            }
          });
      auto log_probs = backend.score(samples);
      std::vector<at::Tensor> diffs;
      for (size_t i = 0; i < samples.size(); ++i) {
        diffs.push_back((log_probs[i] - at::tensor(samples[i].rollout_log_probs)).abs());
      }
      auto d = at::cat(diffs);
      Json row{{"mean", d.mean().item<double>()},
               {"max", d.max().item<double>()},
               {"tokens", d.numel()}};
      if (std::string(mode) == "none") row["free_rows"] = rows, row["free_differ"] = differ;
      table[std::string(exact ? "exact_logprobs/" : "decode_logprobs/") + mode] = row;
    }
  }
  ensure_directory(a.out);
  write_file_atomic(std::filesystem::path(a.out) / "dlogp.json", table.dump(2));
  return 0;
}

int run(const std::vector<std::string>& argv) {
  Args a;
  config::FlagSet f("moe_replay_worker");
  f.add("task", &a.task, "replay | dlogp");
  f.add("model", &a.model, "the trainer's model dir").required = true;
  f.add("routing-model", &a.routing_model, "model whose routing the samples carry (r3)");
  f.add("out", &a.out, "output dir").required = true;
  f.add("replay", &a.replay, "r3 | r2 | none");
  f.add("micro-batch-size", &a.micro_batch_size, "mbs");
  f.add("global-batch-size", &a.global_batch_size, "gbs");
  f.add("samples", &a.samples, "samples in the rollout");
  f.add("gradient-checkpointing", &a.gradient_checkpointing, "ckpt");
  f.add("moe-aux-loss-coeff", &a.aux_coeff, "load-balancing loss weight");
  f.add("ci-test", &a.ci_test, "replay check");
  if (!f.parse(argv)) return 0;
  auto groups = dist::ProcessGroups::init(dist::rendezvous_from_env());
  return a.task == "dlogp" ? run_dlogp(a, *groups) : run_replay(a, *groups);
}

}  // namespace
}  // namespace furlong

int main(int argc, char** argv) {
  try {
    return furlong::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_replay_worker: %s\n", e.what());
    return 1;
  }
}
