// HF model directories: reading the weights of model.safetensors or of the shards listed by
// model.safetensors.index.json, and writing either layout as transformers' save_pretrained does.
#include <ATen/ATen.h>

#include <regex>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "core/json_util.h"
#include "core/strings.h"
#include "io/safetensors.h"

namespace furlong::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

using OwnerMap = std::map<std::string, size_t, std::less<>>;

// The index may only point at files inside the model directory.
void check_shard_name(const std::string& shard, const std::string& tensor,
                      const std::string& where) {
  fs::path path(shard);
  bool inside = !shard.empty() && path.is_relative();
  for (const auto& part : path) inside = inside && part != "..";
  FURLONG_CHECK(inside, where, ": weight_map['", tensor, "'] = '", shard,
                "' must name a file inside the model directory");
}

// weight_map of an index file, grouped by shard file name.
std::map<std::string, std::vector<std::string>> read_weight_map(const fs::path& index_path) {
  const std::string where = index_path.string();
  std::error_code ec;  // a FIFO or device would block or never end the read
  FURLONG_CHECK(fs::is_regular_file(index_path, ec), where, ": not a regular file");
  Json index = read_json_file(index_path);
  FURLONG_CHECK(index.is_object(), where, ": expected a JSON object, got ", json_type_name(index));
  auto weight_map = index.find("weight_map");
  FURLONG_CHECK(weight_map != index.end(), where, ": required field 'weight_map' is missing");
  FURLONG_CHECK(weight_map->is_object(), where,
                ": 'weight_map' must be an object mapping tensor names to shard files, got ",
                json_type_name(*weight_map), " ", json_excerpt(*weight_map));
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [name, shard] : weight_map->items()) {
    FURLONG_CHECK(shard.is_string(), where, ": weight_map['", name,
                  "'] must be a shard file name, got ", json_type_name(shard), " ",
                  json_excerpt(shard));
    const auto& shard_name = shard.get_ref<const std::string&>();
    check_shard_name(shard_name, name, where);
    shards[shard_name].push_back(name);
  }
  return shards;
}

void open_sharded(const fs::path& dir, std::vector<std::shared_ptr<SafetensorsFile>>& files,
                  OwnerMap& owner) {
  const fs::path index_path = dir / kIndexFile;
  const std::string where = index_path.string();
  for (const auto& [shard, names] : read_weight_map(index_path)) {
    const fs::path shard_path = dir / shard;
    std::error_code ec;
    FURLONG_CHECK(fs::is_regular_file(shard_path, ec), where, ": shard '", shard, "' (listed for ",
                  names.size(), " tensors, e.g. '", names.front(), "') does not exist in ",
                  dir.string());
    auto file = SafetensorsFile::open(shard_path);
    for (const auto& name : names) {
      FURLONG_CHECK(file->find(name) != nullptr, where, ": tensor '", name,
                    "' is mapped to shard '", shard, "', but ", shard_path.string(),
                    " has no tensor of that name");
      owner[name] = files.size();
    }
    files.push_back(std::move(file));
  }
}

// Weight-like files in `dir`, to say what was there when no safetensors weights were found.
std::string other_weight_files(const fs::path& dir) {
  static const std::set<std::string> kExtensions = {".safetensors", ".bin",  ".pt",
                                                    ".pth",         ".gguf", ".json"};
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path& path = entry.path();
    if (kExtensions.count(path.extension().string()) && path.filename() != "config.json" &&
        found.size() < 8) {
      found.push_back(path.filename().string());
    }
  }
  std::sort(found.begin(), found.end());
  if (found.empty()) return "";
  return "; the directory holds " + join(found, ", ") + " (only safetensors weights are read)";
}

[[noreturn]] void fail_unknown_tensor(const HfWeights& weights, std::string_view name) {
  std::vector<std::string> names = weights.names();
  auto suggestion = closest_match(name, names);
  FURLONG_FAIL(weights.dir().string(), ": the model weights have no tensor named '", name, "' (",
               names.size(), " tensors",
               suggestion ? "; did you mean '" + *suggestion + "'?" : std::string(), ")");
}

bool is_shard_file_name(const std::string& name) {
  static const std::regex kShard(R"(model-[0-9]+-of-[0-9]+\.safetensors)");
  return std::regex_match(name, kShard);
}

std::string shard_file_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", index, count);
  return buf;
}

// Removes weight files of an earlier save that the new one did not write, so the directory
// holds exactly one consistent checkpoint (a stale index would otherwise take precedence).
void remove_stale_weight_files(const fs::path& dir, const std::set<std::string>& written) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    bool weight_file = name == kSingleFile || name == kIndexFile || is_shard_file_name(name);
    if (weight_file && !written.count(name)) stale.push_back(entry.path());
  }
  for (const auto& path : stale) {
    FURLONG_CHECK(fs::remove(path, ec) || !ec, path.string(), ": cannot remove stale file (",
                  ec.message(), ")");
  }
}

uint64_t tensor_bytes(const at::Tensor& tensor) {
  return tensor.defined() ? static_cast<uint64_t>(tensor.numel()) * tensor.element_size() : 0;
}

// Groups tensor indices into shards in input order, as transformers does: a shard is closed
// when the next tensor would push it past `max_shard_bytes`; an oversized tensor gets its own.
std::vector<std::vector<size_t>> split_into_shards(const NamedTensors& tensors,
                                                   uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t bytes = tensor_bytes(tensors[i].second);
    if (!current.empty() && current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

}  // namespace

HfWeights HfWeights::open(const fs::path& dir) {
  std::error_code ec;
  FURLONG_CHECK(fs::is_directory(dir, ec), dir.string(),
                ": not a directory (expected a HF model directory)");
  HfWeights weights;
  weights.dir_ = dir;
  if (fs::exists(dir / kIndexFile, ec)) {
    open_sharded(dir, weights.files_, weights.owner_);
  } else if (fs::exists(dir / kSingleFile, ec)) {
    auto file = SafetensorsFile::open(dir / kSingleFile);
    for (const auto& info : file->tensors()) weights.owner_[info.name] = 0;
    weights.files_.push_back(std::move(file));
  } else {
    FURLONG_FAIL(dir.string(), ": no model weights found: looked for ", kIndexFile, " and ",
                 kSingleFile, other_weight_files(dir));
  }
  return weights;
}

void HfWeights::rename_prefix(const std::string& stored_prefix, const std::string& prefix) {
  std::map<std::string, size_t, std::less<>> renamed;
  for (const auto& [name, file] : owner_) {
    if (!name.starts_with(stored_prefix)) {
      renamed.emplace(name, file);
      continue;
    }
    const std::string original = on_disk(name);
    const std::string alias = prefix + name.substr(stored_prefix.size());
    FURLONG_CHECK(!owner_.count(alias), dir_.string(), ": tensor '", alias, "' is stored both as ",
                  "itself and as '", original, "'");
    renamed.emplace(alias, file);
    stored_[alias] = original;
  }
  owner_ = std::move(renamed);
}

std::string HfWeights::on_disk(std::string_view name) const {
  auto it = stored_.find(name);
  return it == stored_.end() ? std::string(name) : it->second;
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  out.reserve(owner_.size());
  for (const auto& [name, file] : owner_) out.push_back(name);
  return out;
}

bool HfWeights::contains(std::string_view name) const {
  return owner_.find(name) != owner_.end();
}

const TensorInfo& HfWeights::info(std::string_view name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail_unknown_tensor(*this, name);
  return *files_[it->second]->find(on_disk(name));
}

fs::path HfWeights::file_of(std::string_view name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail_unknown_tensor(*this, name);
  return files_[it->second]->path();
}

at::Tensor HfWeights::get(std::string_view name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail_unknown_tensor(*this, name);
  return files_[it->second]->tensor(on_disk(name));
}

void save_hf_weights(const fs::path& dir, const NamedTensors& tensors, uint64_t max_shard_bytes) {
  ensure_directory(dir);
  std::set<std::string_view> seen;
  for (const auto& [name, tensor] : tensors) {
    FURLONG_CHECK(seen.insert(name).second, dir.string(), ": tensor name '", name,
                  "' is used twice");
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const auto shards = split_into_shards(tensors, max_shard_bytes);
  std::set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors(dir / kSingleFile, tensors, metadata);
    written.insert(kSingleFile);
  } else {
    Json weight_map = Json::object();
    uint64_t total_size = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string file_name = shard_file_name(s + 1, shards.size());
      NamedTensors part;
      for (size_t i : shards[s]) {
        part.push_back(tensors[i]);
        weight_map[tensors[i].first] = file_name;
        total_size += tensor_bytes(tensors[i].second);
      }
      save_safetensors(dir / file_name, part, metadata);
      written.insert(file_name);
    }
    Json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    write_file_atomic(dir / kIndexFile, index.dump(2) + "\n");
    written.insert(kIndexFile);
  }
  remove_stale_weight_files(dir, written);
}

}  // namespace furlong::io
