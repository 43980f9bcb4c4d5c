// Safetensors files: the memory-mapped reader and the streaming, atomic writer.
//
// Reader invariant: every TensorInfo of an open SafetensorsFile has been validated against the
// mapping (parse_safetensors_header), so tensor() never reads outside it.
// Writer invariant: the output is laid out exactly as the reference writer lays it out, and it
// appears under its final name only once complete and fsync'ed.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <random>
#include <set>

#include "core/error.h"
#include "core/json_util.h"
#include "core/strings.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace furlong::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; furlong reads it in place");

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the format's limit
constexpr size_t kLengthPrefixBytes = 8;

uint64_t read_le64(const char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

void append_le64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

std::string errno_text(int err) {
  return std::strerror(err);
}

// Closes a file descriptor on scope exit.
struct ScopedFd {
  int fd = -1;
  ~ScopedFd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reader

struct SafetensorsFile::Mapping {
  const char* base = nullptr;
  size_t size = 0;

  Mapping(const char* base_in, size_t size_in) : base(base_in), size(size_in) {}
  ~Mapping() { ::munmap(const_cast<char*>(base), size); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

SafetensorsFile::~SafetensorsFile() = default;

// Maps a whole regular file of at least 8 bytes read-only. The type is checked before the open:
// opening a FIFO blocks until a writer appears. O_NONBLOCK keeps an open that races a swap to a
// FIFO from blocking too (it changes nothing for a regular file); fstat then refuses it.
std::shared_ptr<const SafetensorsFile::Mapping> SafetensorsFile::map_file(const fs::path& path) {
  const std::string where = path.string();
  struct stat st {};
  FURLONG_CHECK(::stat(path.c_str(), &st) == 0, where, ": cannot open for reading (",
                errno_text(errno), ")");
  FURLONG_CHECK(S_ISREG(st.st_mode), where,
                ": not a regular file (a safetensors file must be one)");
  ScopedFd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  FURLONG_CHECK(file.fd >= 0, where, ": cannot open for reading (", errno_text(errno), ")");
  FURLONG_CHECK(::fstat(file.fd, &st) == 0, where, ": cannot stat (", errno_text(errno), ")");
  FURLONG_CHECK(S_ISREG(st.st_mode), where,
                ": not a regular file (a safetensors file must be one)");
  const auto size = static_cast<uint64_t>(st.st_size);
  FURLONG_CHECK(size >= kLengthPrefixBytes, where, ": file is ", size,
                " bytes, too short to hold the 8-byte header length (truncated?)");
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd, 0);
  FURLONG_CHECK(base != MAP_FAILED, where, ": cannot memory-map (", errno_text(errno), ")");
  return std::make_shared<const Mapping>(static_cast<const char*>(base), size);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const fs::path& path) {
  const std::string where = path.string();
  std::shared_ptr<const Mapping> mapping = map_file(path);
  const uint64_t file_size = mapping->size;
  const uint64_t header_bytes = read_le64(mapping->base);
  FURLONG_CHECK(header_bytes <= kMaxHeaderBytes, where, ": header length ", header_bytes,
                " exceeds the format's limit of ", kMaxHeaderBytes,
                " bytes (corrupt or not a safetensors file)");
  FURLONG_CHECK(header_bytes <= file_size - kLengthPrefixBytes, where, ": header length ",
                header_bytes, " runs past the end of the file (", file_size,
                " bytes; truncated or corrupt)");

  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->data_start_ = kLengthPrefixBytes + header_bytes;
  std::string_view header(mapping->base + kLengthPrefixBytes, header_bytes);
  file->tensors_ =
      parse_safetensors_header(header, file_size - file->data_start_, where, &file->metadata_);
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  file->mapping_ = std::move(mapping);
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

at::Tensor SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    std::vector<std::string> names;
    names.reserve(tensors_.size());
    for (const auto& t : tensors_) names.push_back(t.name);
    auto suggestion = closest_match(name, names);
    FURLONG_FAIL(path_.string(), ": no tensor named '", name, "' (the file holds ", tensors_.size(),
                 " tensors", suggestion ? "; did you mean '" + *suggestion + "'?" : std::string(),
                 ")");
  }
  const auto options = at::TensorOptions().dtype(info->dtype).device(at::kCPU);
  const size_t nbytes = info->end - info->begin;
  if (nbytes == 0) return at::empty(info->shape, options);

  const char* data = mapping_->base + data_start_ + info->begin;
  const size_t alignment = c10::elementSize(info->dtype);
  if (reinterpret_cast<uintptr_t>(data) % alignment != 0) {
    at::Tensor copy = at::empty(info->shape, options);
    std::memcpy(copy.mutable_data_ptr(), data, nbytes);
    return copy;
  }
  // The deleter owns a reference to the mapping, so the view outlives this object safely.
  return at::from_blob(
      const_cast<char*>(data), info->shape, [keep_alive = mapping_](void*) {}, options);
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

// A file written under a temporary name next to `target` and renamed over it by commit().
// Destroying it uncommitted removes the temporary, so a failed save leaves no debris and the
// previous content of `target` untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(fs::path target) : target_(std::move(target)) {
    static std::atomic<uint64_t> counter{0};
    std::random_device random;
    tmp_ = target_;
    tmp_ += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++) + "." +
            std::to_string(random());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    FURLONG_CHECK(fd_ >= 0, tmp_.string(), ": cannot create (", errno_text(errno), ")");
  }

  ~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) {
      std::error_code ignored;
      fs::remove(tmp_, ignored);
    }
  }

  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t size) {
    constexpr size_t kMaxChunk = size_t{1} << 30;
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd_, bytes, std::min(size, kMaxChunk));
      if (n < 0 && errno == EINTR) continue;
      FURLONG_CHECK(n > 0, tmp_.string(), ": write failed (",
                    n < 0 ? errno_text(errno) : std::string("no progress"), ")");
      bytes += n;
      size -= static_cast<size_t>(n);
    }
  }

  void commit() {
    FURLONG_CHECK(::fsync(fd_) == 0, tmp_.string(), ": fsync failed (", errno_text(errno), ")");
    int close_result = ::close(fd_);
    fd_ = -1;
    FURLONG_CHECK(close_result == 0, tmp_.string(), ": close failed (", errno_text(errno), ")");
    std::error_code ec;
    fs::rename(tmp_, target_, ec);
    FURLONG_CHECK(!ec, target_.string(), ": cannot rename the temporary file into place (",
                  ec.message(), ")");
    committed_ = true;
    sync_directory();
  }

 private:
  // Makes the rename itself durable. Best effort: some filesystems refuse fsync on directories.
  void sync_directory() const {
    fs::path dir = target_.parent_path();
    if (dir.empty()) dir = ".";
    int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return;
    ::fsync(dir_fd);
    ::close(dir_fd);
  }

  fs::path target_;
  fs::path tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// One input tensor's place in the file being written.
struct PlannedTensor {
  size_t input_index = 0;
  TensorInfo info;
};

void check_writable(const std::string& name, const at::Tensor& tensor, const std::string& where) {
  const std::string context = where + ": tensor '" + name + "'";
  FURLONG_CHECK(name != "__metadata__", where,
                ": '__metadata__' is reserved and cannot name a tensor");
  FURLONG_CHECK(!detail::find_invalid_utf8(name), where, ": tensor name is not valid UTF-8");
  FURLONG_CHECK(tensor.defined(), context, ": tensor is undefined");
  FURLONG_CHECK(tensor.layout() == at::kStrided, context, ": only dense tensors can be saved");
  FURLONG_CHECK(!tensor.is_meta(), context, ": a meta tensor has no data to save");
  FURLONG_CHECK(detail::safetensors_dtype_name(tensor.scalar_type()).has_value(), context,
                ": dtype ", c10::toString(tensor.scalar_type()),
                " cannot be stored (supported: ", detail::supported_dtype_list(), ")");
}

// Validates the inputs and assigns offsets in the reference writer's order: descending dtype
// rank (alignment), then name, packed contiguously from 0.
std::vector<PlannedTensor> plan_layout(const NamedTensors& tensors, const std::string& where) {
  std::vector<PlannedTensor> plan;
  plan.reserve(tensors.size());
  std::set<std::string_view> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, tensor] = tensors[i];
    check_writable(name, tensor, where);
    FURLONG_CHECK(seen.insert(name).second, where, ": tensor name '", name, "' is used twice");
    PlannedTensor planned;
    planned.input_index = i;
    planned.info.name = name;
    planned.info.dtype = tensor.scalar_type();
    planned.info.shape = tensor.sizes().vec();
    plan.push_back(std::move(planned));
  }
  std::sort(plan.begin(), plan.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    int rank_a = detail::dtype_layout_rank(a.info.dtype);
    int rank_b = detail::dtype_layout_rank(b.info.dtype);
    if (rank_a != rank_b) return rank_a > rank_b;
    return a.info.name < b.info.name;
  });
  uint64_t offset = 0;
  for (auto& planned : plan) {
    const at::Tensor& tensor = tensors[planned.input_index].second;
    planned.info.begin = offset;
    offset += static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    planned.info.end = offset;
  }
  return plan;
}

// The header as the reference writer produces it: compact JSON, "__metadata__" first (when
// non-empty), tensors in file order, padded with spaces to a multiple of 8 bytes.
std::string header_text(const std::vector<PlannedTensor>& plan,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& where) {
  std::string out = "{";
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) {
      FURLONG_CHECK(!detail::find_invalid_utf8(key) && !detail::find_invalid_utf8(value), where,
                    ": metadata key '", key, "' or its value is not valid UTF-8");
      meta[key] = value;
    }
    out += "\"__metadata__\":" + meta.dump();
  }
  for (const auto& planned : plan) {
    const TensorInfo& info = planned.info;
    if (out.size() > 1) out += ",";
    out += Json(info.name).dump();
    out += ":{\"dtype\":\"";
    out += *detail::safetensors_dtype_name(info.dtype);
    out += "\",\"shape\":";
    out += Json(info.shape).dump();
    out +=
        ",\"data_offsets\":[" + std::to_string(info.begin) + "," + std::to_string(info.end) + "]}";
  }
  out += "}";
  out.append((8 - out.size() % 8) % 8, ' ');
  return out;
}

// Streams one tensor's bytes: a CPU, contiguous copy is made only when the input is not
// already one, so peak extra memory is one tensor.
void write_tensor_data(AtomicFileWriter& out, const at::Tensor& input, uint64_t nbytes) {
  if (nbytes == 0) return;
  at::Tensor tensor = input.detach();
  if (!tensor.device().is_cpu()) tensor = tensor.to(at::kCPU);
  tensor = tensor.resolve_neg().contiguous();
  FURLONG_ASSERT(static_cast<uint64_t>(tensor.numel()) * tensor.element_size() == nbytes,
                 "tensor size changed while saving");
  out.write(tensor.const_data_ptr(), nbytes);
}

}  // namespace

void save_safetensors(const fs::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = path.string();
  std::vector<PlannedTensor> plan = plan_layout(tensors, where);
  std::string prefix;
  std::string header = header_text(plan, metadata, where);
  append_le64(prefix, header.size());
  prefix += header;

  AtomicFileWriter out(path);
  out.write(prefix.data(), prefix.size());
  for (const auto& planned : plan) {
    write_tensor_data(out, tensors[planned.input_index].second,
                      planned.info.end - planned.info.begin);
  }
  out.commit();
}

}  // namespace furlong::io
