#include "metrics/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/files.h"

namespace furlong::metrics {

namespace {

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

namespace tensorboard {

namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

template <typename T>
void put_little_endian(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little-endian
  out.append(bytes, sizeof(T));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event fields 1 (wall_time, double) and 2 (step, int64).
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, kFixed64);
  put_little_endian(e, wall_time);
  if (step != 0) {
    put_tag(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));  // negative: ten-byte two's complement
  }
  return e;
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  auto e = event_header(wall_time, 0);
  put_bytes_field(e, 3, "brain.Event:2");  // Event.file_version
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes_field(v, 1, tag);  // Summary.Value.tag
    put_tag(v, 2, kFixed32);     // Summary.Value.simple_value
    put_little_endian(v, value);
    put_bytes_field(summary, 1, v);  // Summary.value (repeated)
  }
  auto e = event_header(wall_time, step);
  put_bytes_field(e, 5, summary);  // Event.summary
  return e;
}

std::string frame_record(const std::string& data) {
  std::string out;
  const uint64_t length = data.size();
  put_little_endian(out, length);
  put_little_endian(out, masked_crc32c(out.data(), sizeof(length)));
  out += data;
  put_little_endian(out, masked_crc32c(data.data(), data.size()));
  return out;
}

}  // namespace tensorboard

namespace {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::filesystem::path fresh_event_file(const std::filesystem::path& dir) {
  const auto secs = static_cast<int64_t>(now_seconds());
  const std::string base = "events.out.tfevents." + std::to_string(secs) + "." + host_name();
  auto path = dir / base;
  for (int n = 1; std::filesystem::exists(path); ++n) {
    path = dir / (base + "." + std::to_string(getpid()) + "." + std::to_string(n));
  }
  return path;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& log_dir) {
  ensure_directory(log_dir);
  path_ = fresh_event_file(log_dir);
  file_ = std::fopen(path_.c_str(), "wb");
  FURLONG_CHECK(file_ != nullptr, path_.string(),
                ": cannot create TensorBoard event file: ", std::strerror(errno));
  write_record(tensorboard::encode_file_version_event(now_seconds()));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_record(const std::string& data) {
  const auto record = tensorboard::frame_record(data);
  const bool ok = std::fwrite(record.data(), 1, record.size(), file_) == record.size() &&
                  std::fflush(file_) == 0;
  FURLONG_CHECK(ok, path_.string(), ": write failed: ", std::strerror(errno));
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, double>>& values) {
  std::vector<std::pair<std::string, float>> as_float;
  as_float.reserve(values.size());
  for (const auto& [tag, v] : values) as_float.emplace_back(tag, static_cast<float>(v));
  write_record(tensorboard::encode_scalars_event(now_seconds(), step, as_float));
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalars(step, {{tag, value}});
}

}  // namespace furlong::metrics
