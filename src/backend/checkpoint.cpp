#include "backend/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "backend/fsdp_backend.h"
#include "core/dtype.h"
#include "core/files.h"
#include "core/log.h"
#include "core/strings.h"
#include "dist/process_group.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/registry.h"

namespace furlong::backend {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "furlong-sharded-v1";
constexpr const char* kTracker = "latest_checkpointed_iteration.txt";

std::string shard_file(int64_t shard) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "shard-%05lld.safetensors", static_cast<long long>(shard));
  return buf;
}

std::string rank_file(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05d.bin", rank);
  return buf;
}

// One tensor of a sharded set: this rank's rows and the global shape.
struct ShardedTensor {
  std::string name;
  at::Tensor local;  // rows [row_begin, row_begin + local_rows) of the global tensor
  std::vector<int64_t> shape;
};

// Writes this shard's tensors (replicate index 0 only) and, on rank 0, the index.
void write_sharded(const fs::path& dir, const std::vector<ShardedTensor>& tensors, dist::Mesh& mesh,
                   bool root, const Json& index_extra) {
  if (mesh.replicate_index() == 0) {
    io::NamedTensors named;
    for (const auto& t : tensors) named.emplace_back(t.name, t.local.detach().cpu().contiguous());
    io::save_safetensors(dir / shard_file(mesh.shard_index()), named);
  }
  if (!root) return;
  Json index = {
      {"format", kFormat}, {"shard_count", mesh.shard_size()}, {"tensors", Json::object()}};
  for (const auto& t : tensors) {
    index["tensors"][t.name] = {{"shape", t.shape}, {"dtype", dtype_name(t.local.scalar_type())}};
  }
  for (auto it = index_extra.begin(); it != index_extra.end(); ++it) index[it.key()] = it.value();
  write_file_atomic(dir / "index.json", index.dump(1) + "\n");
}

// Reads rows of the tensors of a sharded set written at any shard count.
class ShardedReader {
 public:
  explicit ShardedReader(fs::path dir) : dir_(std::move(dir)) {
    index_ = read_json_file(dir_ / "index.json");
    std::string where = (dir_ / "index.json").string();
    FURLONG_CHECK(json_get_or<std::string>(index_, "format", "", where) == kFormat, where,
                  ": not a furlong checkpoint index (format '", kFormat, "' expected)");
    shard_count_ = json_get<int64_t>(index_, "shard_count", where);
  }
  const Json& index() const { return index_; }
  bool contains(const std::string& name) const { return index_["tensors"].contains(name); }
  std::vector<int64_t> shape(const std::string& name) const {
    FURLONG_CHECK(contains(name), (dir_ / "index.json").string(), ": no tensor '", name, "'");
    return index_["tensors"][name]["shape"].get<std::vector<int64_t>>();
  }

  // Rows [begin, begin + count) of `name` (in its stored dtype, on the CPU).
  at::Tensor rows(const std::string& name, int64_t begin, int64_t count) {
    auto global = shape(name);
    int64_t d0 = global.empty() ? 1 : global[0];
    FURLONG_CHECK(begin >= 0 && begin + count <= d0, dir_.string(), ": tensor '", name, "' has ",
                  d0, " rows; rows [", begin, ", ", begin + count, ") requested");
    std::vector<int64_t> piece_shape = global;
    if (count == 0) {
      piece_shape[0] = 0;
      return at::empty(piece_shape, at::kFloat);
    }
    int64_t per = std::max<int64_t>(1, (d0 + shard_count_ - 1) / shard_count_);
    std::vector<at::Tensor> pieces;
    for (int64_t s = begin / per; s <= (begin + count - 1) / per; ++s) {
      at::Tensor held = file(s).tensor(name);  // rows [s * per, s * per + held rows)
      int64_t lo = std::max(begin, s * per), hi = std::min(begin + count, s * per + held.size(0));
      pieces.push_back(held.narrow(0, lo - s * per, hi - lo));
    }
    return pieces.size() == 1 ? pieces[0] : at::cat(pieces, 0);
  }

 private:
  io::SafetensorsFile& file(int64_t shard) {
    auto& f = files_[shard];
    if (!f) f = io::SafetensorsFile::open(dir_ / shard_file(shard));
    return *f;
  }
  fs::path dir_;
  Json index_;
  int64_t shard_count_ = 1;
  std::map<int64_t, std::shared_ptr<io::SafetensorsFile>> files_;
};

std::vector<ShardedTensor> model_tensors(fsdp::FsdpModel& model) {
  std::vector<ShardedTensor> out;
  for (auto& unit : model.units()) {
    for (size_t i = 0; i < unit->layouts().size(); ++i) {
      out.push_back({unit->layouts()[i].name, unit->shards()[i], unit->layouts()[i].shape});
    }
  }
  return out;
}

// exp_avg / exp_avg_sq of every parameter, named "<param>/<key>", and the steps by name.
std::pair<std::vector<ShardedTensor>, Json> optimizer_tensors(FsdpBackend& backend) {
  auto params = model_tensors(backend.model());
  std::vector<ShardedTensor> out;
  Json steps = Json::object();
  for (const auto& [key, tensor] : backend.optimizer().state_dict()) {
    auto dot = key.find('.');
    size_t i = std::stoul(key.substr(0, dot));
    std::string field = key.substr(dot + 1);
    if (field == "step") {
      steps[params[i].name] = tensor.item<double>();
    } else {
      out.push_back({params[i].name + "/" + field, tensor, params[i].shape});
    }
  }
  return {out, steps};
}

void copy_hf_files(const fs::path& from, const fs::path& to) {
  ensure_directory(to);
  for (const char* name :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt",
        "preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json"}) {
    if (fs::exists(from / name))
      fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
  }
}

// The file beside a checkpoint's hf/ files that holds the tensors of a multimodal checkpoint
// that furlong does not run (the vision tower), under their stored names.
constexpr const char* kPassengerFile = "passengers.safetensors";

// Copies those tensors from the source checkpoint `hf`, as they are; nothing for a causal LM.
void copy_passenger_tensors(const std::string& hf, const fs::path& to,
                            const models::CausalLM& model) {
  auto weights = models::open_hf_weights(hf, model.config());
  const auto names = models::passenger_tensors(model, weights);
  if (names.empty()) return;
  auto stored = io::HfWeights::open(hf);
  io::NamedTensors tensors;
  for (const auto& name : names) tensors.emplace_back(name, stored.get(name).contiguous());
  io::save_safetensors(to / kPassengerFile, tensors, {{"format", "pt"}});
}

void write_rng(const fs::path& dir, int rank) {
  auto gen = at::detail::getDefaultCPUGenerator();
  auto state = gen.get_state();
  std::string bytes(static_cast<const char*>(state.data_ptr()), state.numel());
  write_file_atomic(dir / rank_file(rank), bytes);
}

// Test hook: FURLONG_FAULT_KILL_IN_SAVE="<rank>:<iteration>" makes that rank SIGKILL itself in
// the middle of that save (after writing its model shard), to test that a save which dies
// leaves the previous checkpoint loadable.
void maybe_die_in_save(int rank, int64_t iteration) {
  const char* spec = std::getenv("FURLONG_FAULT_KILL_IN_SAVE");
  if (spec == nullptr) return;
  if (std::string(spec) == std::to_string(rank) + ":" + std::to_string(iteration)) {
    LOG_WARN("FURLONG_FAULT_KILL_IN_SAVE: rank ", rank, " kills itself during the save");
    std::raise(SIGKILL);
  }
}

void publish(const fs::path& root, const fs::path& partial, const fs::path& final_dir,
             int64_t iteration) {
  if (fs::exists(final_dir)) {
    auto old = final_dir;
    old += ".old";
    fs::remove_all(old);
    fs::rename(final_dir, old);
    fs::rename(partial, final_dir);
    fs::remove_all(old);
  } else {
    fs::rename(partial, final_dir);
  }
  write_file_atomic(root / kTracker, std::to_string(iteration) + "\n");
}

// "iter_<digits><suffix>": what iteration_dir() names, with a suffix of save_checkpoint's.
bool is_iteration_name(const std::string& name, const std::string& suffix) {
  if (!name.starts_with("iter_") || !name.ends_with(suffix)) return false;
  const auto digits = name.substr(5, name.size() - 5 - suffix.size());
  return !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
}

// Whether `entry` is something a killed save of this code left in the checkpoint root.
bool is_stale_save_leftover(const fs::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  // write_file_atomic (core/files.cpp) names its temporary "<file>.tmp.<pid>.<random>".
  if (name.starts_with(std::string(kTracker) + ".tmp.")) return entry.is_regular_file();
  if (!entry.is_directory()) return false;
  if (is_iteration_name(name, ".partial")) return true;
  // publish() moves iter_N aside as iter_N.old while iter_N.partial takes its place; the old
  // copy is stale once iter_N exists again (without it, it may be the only copy: kept).
  if (is_iteration_name(name, ".old")) {
    return fs::is_directory(entry.path().parent_path() / name.substr(0, name.size() - 4));
  }
  return false;
}

}  // namespace

int remove_stale_checkpoint_files(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return 0;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (is_stale_save_leftover(entry)) stale.push_back(entry.path());
  }
  int removed = 0;
  for (const auto& path : stale) {
    fs::remove_all(path, ec);
    if (ec) {
      LOG_WARN(path.string(), ": cannot remove what a killed save left (", ec.message(), ")");
    } else {
      ++removed;
    }
  }
  if (removed > 0) {
    LOG_INFO(root.string(), ": removed ", removed, " leftover(s) of killed saves");
  }
  return removed;
}

fs::path iteration_dir(const fs::path& root, int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "iter_%07lld", static_cast<long long>(iteration));
  return root / buf;
}

std::optional<int64_t> latest_iteration(const fs::path& root) {
  auto tracker = root / kTracker;
  if (!fs::exists(tracker)) return std::nullopt;
  std::string text(trim(read_file(tracker)));
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  FURLONG_CHECK(!text.empty() && end == text.c_str() + text.size() && v >= 0, tracker.string(),
                ": expected an iteration number, got '", text, "'");
  return v;
}

void save_checkpoint(const fs::path& root, int64_t rollout_id, FsdpBackend& backend,
                     const CheckpointOptions& options, const Json& extra) {
  auto t0 = std::chrono::steady_clock::now();
  auto& world = backend.groups().world();
  const bool root_rank = world.rank() == 0;
  const int64_t iteration = rollout_id + 1;
  const auto final_dir = iteration_dir(root, iteration);
  auto partial = final_dir;
  partial += ".partial";
  if (root_rank) {
    // Leftovers of saves that died earlier (this one's partial directory included). No rank of
    // this job writes under `root` now: the previous save ended with a barrier, and all that
    // is removed is written by rank 0 alone.
    remove_stale_checkpoint_files(root);
    for (const char* sub : {"model", "optimizer", "rng"}) ensure_directory(partial / sub);
  }
  world.barrier();

  auto& mesh = backend.mesh();
  write_sharded(partial / "model", model_tensors(backend.model()), mesh, root_rank, Json::object());
  maybe_die_in_save(world.rank(), iteration);
  if (options.save_optim) {
    auto [tensors, steps] = optimizer_tensors(backend);
    write_sharded(partial / "optimizer", tensors, mesh, root_rank, Json{{"steps", steps}});
  }
  write_rng(partial / "rng", world.rank());
  if (root_rank) {
    write_file_atomic(partial / "lr_scheduler.json",
                      backend.scheduler().state_dict().dump(1) + "\n");
    copy_hf_files(backend.options().model.hf_checkpoint, partial / "hf");
    copy_passenger_tensors(backend.options().model.hf_checkpoint, partial / "hf",
                           backend.model().model());
    Json meta = {{"format", "furlong-checkpoint-v1"},
                 {"iteration", iteration},
                 {"rollout_id", rollout_id},
                 {"next_rollout_id", rollout_id + 1},
                 {"global_step", backend.global_step()},
                 {"world_size", world.size()},
                 {"dp_replicate_size", mesh.replicate_size()},
                 {"dp_shard_size", mesh.shard_size()},
                 {"storage_dtype", dtype_name(backend.model().storage_dtype())},
                 {"compute_dtype", dtype_name(backend.model().options().param_dtype)},
                 {"timestamp",
                  std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                      .count()},
                 {"extra", extra}};
    write_file_atomic(partial / "meta.json", meta.dump(1) + "\n");
  }
  world.barrier();  // every rank's files are written and synced
  if (root_rank) publish(root, partial, final_dir, iteration);
  world.barrier();
  LOG_INFO("saved checkpoint ", final_dir.string(), " in ",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
}

std::optional<LoadedCheckpoint> load_checkpoint(const fs::path& root, FsdpBackend& backend,
                                                const CheckpointOptions& options) {
  // Only in this job's own --save directory: another job may be saving into a directory that
  // this one merely loads from.
  if (backend.groups().world().rank() == 0 && options.save &&
      fs::weakly_canonical(*options.save) == fs::weakly_canonical(root)) {
    remove_stale_checkpoint_files(root);
  }
  auto iteration = latest_iteration(root);
  if (!iteration) {
    LOG_INFO("--load ", root.string(), ": no ", kTracker,
             " (a fresh run); starting from --hf-checkpoint");
    return std::nullopt;
  }
  auto dir = iteration_dir(root, *iteration);
  FURLONG_CHECK(fs::exists(dir / "meta.json"), dir.string(), ": the checkpoint named by ",
                (root / kTracker).string(), " is missing or incomplete (no meta.json)");
  Json meta = read_json_file(dir / "meta.json");
  c10::NoGradGuard no_grad;
  ShardedReader model_reader(dir / "model");
  for (auto& unit : backend.model().units()) {
    for (size_t i = 0; i < unit->layouts().size(); ++i) {
      const auto& l = unit->layouts()[i];
      FURLONG_CHECK(model_reader.shape(l.name) == l.shape, dir.string(), ": tensor '", l.name,
                    "' has another shape than the model");
      unit->shards()[i].copy_(model_reader.rows(l.name, l.row_begin, l.local_rows));
    }
  }
  if (options.load_optim && fs::exists(dir / "optimizer" / "index.json")) {
    ShardedReader reader(dir / "optimizer");
    auto params = model_tensors(backend.model());
    optim::StateTensors state;
    const Json& steps = reader.index()["steps"];
    size_t param_index = 0;
    for (auto& unit : backend.model().units()) {
      for (const auto& l : unit->layouts()) {
        std::string prefix = std::to_string(param_index++) + ".";
        if (!steps.contains(l.name)) continue;
        for (const char* field : {"exp_avg", "exp_avg_sq"}) {
          state.emplace_back(prefix + field,
                             reader.rows(l.name + "/" + field, l.row_begin, l.local_rows));
        }
        state.emplace_back(prefix + "step",
                           at::scalar_tensor(steps[l.name].get<double>(), at::kFloat));
      }
    }
    backend.optimizer().load_state_dict(state);
  }
  if (fs::exists(dir / "lr_scheduler.json")) {
    backend.scheduler().load_state_dict(read_json_file(dir / "lr_scheduler.json"));
  }
  auto& world = backend.groups().world();
  auto rng = dir / "rng" / rank_file(world.rank());
  if (options.load_rng && fs::exists(rng) &&
      json_get<int64_t>(meta, "world_size", "meta.json") == world.size()) {
    std::string bytes = read_file(rng);
    auto state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
    std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
    auto gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(state);
  }
  LoadedCheckpoint loaded;
  loaded.iteration = *iteration;
  loaded.next_rollout_id = json_get<int64_t>(meta, "next_rollout_id", "meta.json");
  loaded.global_step = json_get<int64_t>(meta, "global_step", "meta.json");
  if (meta.contains("extra")) loaded.extra = meta["extra"];
  world.barrier();
  LOG_INFO("resumed from ", dir.string(), " (written by ", meta["world_size"], " ranks; rollout ",
           loaded.next_rollout_id, ", step ", loaded.global_step, ")");
  return loaded;
}

namespace {

// The dtype an export writes by default: the trained policy's weights as its forward used them,
// i.e. the master cast to the compute dtype, or the master itself where it is narrower. A
// checkpoint without a recorded compute dtype exports its storage dtype (lossless).
c10::ScalarType policy_dtype(const Json& meta) {
  auto storage = parse_dtype(json_get<std::string>(meta, "storage_dtype", "meta.json"),
                             "meta.json storage_dtype");
  if (!meta.contains("compute_dtype")) return storage;
  auto compute = parse_dtype(json_get<std::string>(meta, "compute_dtype", "meta.json"),
                             "meta.json compute_dtype");
  return c10::elementSize(compute) < c10::elementSize(storage) ? compute : storage;
}

// What casting the policy's weights to `to` changes: the share of elements that move and the
// relative RMS of the change, accumulated over every tensor.
struct RoundingLoss {
  double changed = 0, total = 0, diff_sq = 0, norm_sq = 0;
  void add(const at::Tensor& policy, const at::Tensor& exported) {
    auto p = policy.to(at::kDouble), e = exported.to(at::kDouble);
    changed += p.ne(e).sum().item<double>();
    total += static_cast<double>(p.numel());
    diff_sq += (p - e).square().sum().item<double>();
    norm_sq += p.square().sum().item<double>();
  }
};

}  // namespace

void export_hf(const fs::path& checkpoint_root, std::optional<int64_t> iteration,
               const fs::path& out, std::optional<c10::ScalarType> dtype) {
  if (!iteration) iteration = latest_iteration(checkpoint_root);
  FURLONG_CHECK(iteration.has_value(), checkpoint_root.string(), ": no ", kTracker,
                "; pass the directory given to --save");
  auto dir = iteration_dir(checkpoint_root, *iteration);
  FURLONG_CHECK(fs::exists(dir / "meta.json") && fs::exists(dir / "hf" / "config.json"),
                dir.string(), ": missing or incomplete checkpoint");
  FURLONG_CHECK(!fs::exists(out / "config.json"), out.string(),
                ": already holds a model; choose an empty directory");
  Json config = read_json_file(dir / "hf" / "config.json");
  // A multimodal checkpoint's text tensors go back under its own prefix.
  const auto model_config =
      models::create_model(config, (dir / "hf" / "config.json").string())->config();
  const auto policy = policy_dtype(read_json_file(dir / "meta.json"));
  const auto out_dtype = dtype.value_or(policy);
  ShardedReader reader(dir / "model");
  io::NamedTensors tensors;
  RoundingLoss loss;
  for (auto it = reader.index()["tensors"].begin(); it != reader.index()["tensors"].end(); ++it) {
    auto shape = it.value()["shape"].get<std::vector<int64_t>>();
    auto policy_weights = reader.rows(it.key(), 0, shape[0]).to(policy);
    auto exported = policy_weights.to(out_dtype).contiguous();
    if (out_dtype != policy) loss.add(policy_weights, exported);
    tensors.emplace_back(models::checkpoint_tensor_name(model_config, it.key()),
                         std::move(exported));
  }
  size_t passengers = 0;
  if (fs::exists(dir / "hf" / kPassengerFile)) {  // exported as they were loaded
    auto file = io::SafetensorsFile::open(dir / "hf" / kPassengerFile);
    for (const auto& info : file->tensors()) {
      tensors.emplace_back(info.name, file->tensor(info.name));
      ++passengers;
    }
  }
  if (out_dtype != policy) {
    LOG_WARN("export-hf: --dtype ", dtype_name(out_dtype), " rounds the trained policy's ",
             dtype_name(policy), " weights: ", 100.0 * loss.changed / std::max(loss.total, 1.0),
             "% of them change, relative RMS change ",
             std::sqrt(loss.diff_sq / std::max(loss.norm_sq, 1e-300)),
             " (small-LR updates can fall below that resolution); omit --dtype to export ",
             dtype_name(policy));
  }
  copy_hf_files(dir / "hf", out);
  io::save_hf_weights(out, tensors);
  config.erase("dtype");
  config["torch_dtype"] = dtype_name(out_dtype);
  write_file_atomic(out / "config.json", config.dump(2) + "\n");
  LOG_INFO("exported ", dir.string(), " to ", out.string(), " (", tensors.size(), " tensors, ",
           dtype_name(out_dtype),
           passengers ? ", " + std::to_string(passengers) + " of them kept as loaded" : "", ")");
}

}  // namespace furlong::backend
