// A TensorBoard event-file writer, written from the format's description (no TensorFlow, no
// protobuf library): scalars only, which is what training curves need.
//
// File: `<dir>/events.out.tfevents.<unix seconds>.<hostname>` (a ".<pid>.<n>" suffix is added
// if that name exists), a sequence of records
//   u64 LE length | u32 LE masked_crc32c(length bytes) | data | u32 LE masked_crc32c(data)
// where data is a serialized `Event` protobuf: the first one carries
// file_version "brain.Event:2", the others a Summary of {tag, simple_value} values. Each
// add_scalars() call is one Event, written and flushed at once, so a reader (or a crash)
// sees whole steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace furlong::metrics {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF).
// `crc` is a previous result to extend (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's masking of a CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

namespace tensorboard {
// Serialized Event messages and record framing (exposed for tests).
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& values);
std::string frame_record(const std::string& data);
}  // namespace tensorboard

class TensorBoardWriter {
 public:
  // Creates `log_dir` if needed and starts a new event file in it.
  explicit TensorBoardWriter(const std::filesystem::path& log_dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at `step` holding every (tag, value); values are stored as float32, as
  // TensorBoard's simple_value is. Written and flushed before returning.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void add_scalar(const std::string& tag, double value, int64_t step);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace furlong::metrics
