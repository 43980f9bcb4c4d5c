// Safetensors files: reading (mmap, zero-copy) and writing, plus HF checkpoint directories
// (a single model.safetensors, or shards listed by model.safetensors.index.json).
//
// Format: [u64 LE header length N][N bytes of UTF-8 JSON header][data buffer]. The header maps
// tensor name -> {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative to the data
// buffer) plus an optional "__metadata__" string->string map. Offsets must tile the buffer
// exactly. Every violation is reported as furlong::Error naming the file and the problem.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace furlong::io {

struct TensorInfo {
  std::string name;
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer, end exclusive
  uint64_t end = 0;
};

// The safetensors dtype string ("BF16") <-> ScalarType. Unsupported strings are an error
// naming `where`.
c10::ScalarType dtype_from_safetensors(std::string_view name, const std::string& where);
std::string dtype_to_safetensors(c10::ScalarType dtype);

// A validated, memory-mapped safetensors file. Tensors returned by tensor() are CPU views into
// the mapping that keep it alive; they must not be written to (the mapping is read-only, so an
// in-place op on a view faults: clone first).
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // In data order (ascending offsets).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr if absent.
  const TensorInfo* find(std::string_view name) const;
  // Error naming the file if absent. A tensor whose bytes are not aligned for its dtype inside
  // the mapping (possible in files from other writers) is returned as an aligned copy.
  at::Tensor tensor(std::string_view name) const;

 private:
  struct Mapping;  // the mmap'd file; shared with every view handed out
  SafetensorsFile() = default;
  static std::shared_ptr<const Mapping> map_file(const std::filesystem::path& path);
  std::filesystem::path path_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<const Mapping> mapping_;
  size_t data_start_ = 0;  // 8 + header length
};

// Parses and validates a header (the JSON text) against a data buffer of `data_size` bytes.
// Exposed for tests and fuzzing; `where` names the file in errors. Returns tensors in data
// order (ascending offsets); `metadata` (may be null) receives "__metadata__".
std::vector<TensorInfo> parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                                 const std::string& where,
                                                 std::map<std::string, std::string>* metadata);

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes a safetensors file atomically (temporary file + rename). Tensors may live on any
// device and be non-contiguous; names must be unique. Layout follows the reference writer:
// header padded with spaces to a multiple of 8, tensors sorted by dtype alignment then name.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The weights of a HF model directory.
class HfWeights {
 public:
  // Opens <dir>/model.safetensors.index.json if present (every listed shard must exist),
  // else <dir>/model.safetensors; an error lists what was looked for.
  static HfWeights open(const std::filesystem::path& dir);

  // Looks tensors stored under `stored_prefix` up under `prefix` instead (a multimodal
  // checkpoint's "model.language_model." as a causal LM's "model."): names() lists them so, and
  // on_disk() gives back the stored name. Tensors outside `stored_prefix` keep their names.
  void rename_prefix(const std::string& stored_prefix, const std::string& prefix);
  // The name `name` is stored under in the files.
  std::string on_disk(std::string_view name) const;

  std::vector<std::string> names() const;
  bool contains(std::string_view name) const;
  const TensorInfo& info(std::string_view name) const;
  // The file holding `name` (for error messages).
  std::filesystem::path file_of(std::string_view name) const;
  at::Tensor get(std::string_view name) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t, std::less<>> owner_;        // tensor name -> index in files_
  std::map<std::string, std::string, std::less<>> stored_;  // renamed name -> name in the file
};

// Writes weights as HF does: one model.safetensors when they fit in `max_shard_bytes`, else
// model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json
// ({"metadata": {"total_size": ...}, "weight_map": {...}}). Metadata {"format": "pt"}.
void save_hf_weights(const std::filesystem::path& dir, const NamedTensors& tensors,
                     uint64_t max_shard_bytes = 5ull << 30);

}  // namespace furlong::io
