// Malformed safetensors files: each must fail with a furlong::Error that names the file and
// the specific problem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "common/test_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace furlong::io {
namespace {

using testing::error_of;
using testing::le64;
using testing::raw_file;
using testing::read_bytes;
using testing::write_bytes;

// Writes `bytes` as <scratch>/<name> and returns the message of opening it.
std::string open_error(const std::string& name, const std::string& bytes) {
  auto path = furlong::testing::scratch_dir() / name;
  write_bytes(path, bytes);
  return error_of([&] { SafetensorsFile::open(path); });
}

// An F32 entry with the given shape and offsets.
std::string f32_entry(const std::string& name, const std::string& shape, uint64_t begin,
                      uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

TEST(SafetensorsErrors, TruncatedFiles) {
  EXPECT_HAS(open_error("empty.safetensors", ""),
             "empty.safetensors: file is 0 bytes, too short to hold the 8-byte header length");
  EXPECT_HAS(open_error("five.safetensors", std::string("\x10\x00\x00\x00\x00", 5)),
             "five.safetensors: file is 5");

  auto dir = furlong::testing::scratch_dir();
  save_safetensors(dir / "good.safetensors", {{"w", at::ones({4, 4})}});
  const std::string good = read_bytes(dir / "good.safetensors");
  // Cut inside the data buffer: the tensor now reaches past it.
  auto msg = open_error("cut_data.safetensors", good.substr(0, good.size() - 1));
  EXPECT_HAS(msg,
             "cut_data.safetensors: tensor 'w': data_offsets [0, 64) lie outside the data "
             "buffer, which holds 63 bytes");
  // Cut inside the header.
  msg = open_error("cut_header.safetensors", good.substr(0, 20));
  EXPECT_HAS(msg, "cut_header.safetensors: header length");
  EXPECT_HAS(msg, "runs past the end of the file (20 bytes");
}

TEST(SafetensorsErrors, HeaderLengthThatLies) {
  auto msg = open_error("huge.safetensors", le64(200'000'000) + "{}");
  EXPECT_HAS(msg,
             "huge.safetensors: header length 200000000 exceeds the format's limit of "
             "100000000 bytes");
  msg = open_error("max.safetensors", le64(UINT64_MAX) + "{}");
  EXPECT_HAS(msg, "max.safetensors: header length 18446744073709551615 exceeds");
  msg = open_error("long.safetensors", le64(100) + "{}      ");
  EXPECT_HAS(msg, "long.safetensors: header length 100 runs past the end of the file (16 bytes");
  // Shorter than the real header: the JSON is cut.
  msg = open_error("short.safetensors", le64(5) + "{\"a\":{}}");
  EXPECT_HAS(msg, "short.safetensors: header: invalid JSON");
}

TEST(SafetensorsErrors, OffsetsOutOfRangeOverlappingGapsAndTrailingBytes) {
  auto msg = open_error("range.safetensors",
                        raw_file("{" + f32_entry("w", "[4]", 0, 16) + "}", std::string(8, 0)));
  EXPECT_HAS(msg,
             "range.safetensors: tensor 'w': data_offsets [0, 16) lie outside the data "
             "buffer, which holds 8 bytes");

  msg = open_error("overlap.safetensors", raw_file("{" + f32_entry("a", "[2]", 0, 8) + "," +
                                                       f32_entry("b", "[2]", 4, 12) + "}",
                                                   std::string(12, 0)));
  EXPECT_HAS(msg, "overlap.safetensors: tensors 'a' [0, 8) and 'b' [4, 12) overlap");

  msg = open_error("gap.safetensors", raw_file("{" + f32_entry("a", "[1]", 0, 4) + "," +
                                                   f32_entry("b", "[1]", 8, 12) + "}",
                                               std::string(12, 0)));
  EXPECT_HAS(msg,
             "gap.safetensors: bytes [4, 8) of the data buffer belong to no tensor (a gap "
             "before 'b')");

  msg = open_error("tail.safetensors",
                   raw_file("{" + f32_entry("a", "[1]", 0, 4) + "}", std::string(10, 0)));
  EXPECT_HAS(msg, "tail.safetensors: the data buffer holds 10 bytes but the tensors cover only 4");

  msg = open_error("reversed.safetensors",
                   raw_file("{" + f32_entry("a", "[1]", 8, 4) + "}", std::string(8, 0)));
  EXPECT_HAS(msg, "reversed.safetensors: tensor 'a': data_offsets [8, 4) are reversed");
}

TEST(SafetensorsErrors, ByteCountThatDisagreesWithDtypeAndShape) {
  auto msg = open_error(
      "model.safetensors",
      raw_file("{" + f32_entry("model.norm.weight", "[4, 4]", 0, 12) + "}", std::string(12, 0)));
  EXPECT_HAS(msg,
             "model.safetensors: tensor 'model.norm.weight': data_offsets [0, 12) hold 12 "
             "bytes but dtype F32 and shape [4, 4] need 64");
  msg = open_error("overflow.safetensors",
                   raw_file("{" + f32_entry("w", "[4611686018427387904, 4]", 0, 0) + "}", ""));
  EXPECT_HAS(msg, "overflow.safetensors: tensor 'w': shape [4611686018427387904, 4] has too many");
}

TEST(SafetensorsErrors, BadDtypes) {
  auto entry = [](const std::string& dtype) {
    return raw_file(R"({"w":{"dtype":")" + dtype + R"(","shape":[2],"data_offsets":[0,2]}})",
                    std::string(2, 0));
  };
  auto msg = open_error("f8.safetensors", entry("F8_E4M3"));
  EXPECT_HAS(msg, "f8.safetensors: tensor 'w': unsupported dtype 'F8_E4M3'");
  msg = open_error("typo.safetensors", entry("FP16"));
  EXPECT_HAS(msg, "typo.safetensors: tensor 'w': unknown dtype 'FP16'");
  msg = open_error("number.safetensors",
                   raw_file(R"({"w":{"dtype":7,"shape":[],"data_offsets":[0,4]}})", ""));
  EXPECT_HAS(msg, "number.safetensors: tensor 'w': 'dtype' must be a string, got integer 7");
}

TEST(SafetensorsErrors, BadJsonAndBadUtf8) {
  auto msg = open_error("syntax.safetensors", raw_file(R"({"w": {"dtype": )", ""));
  EXPECT_HAS(msg, "syntax.safetensors: header: invalid JSON at line 1 column");
  msg = open_error("utf8.safetensors", raw_file("{\"w\xff\": 1}", ""));
  EXPECT_HAS(msg, "utf8.safetensors: header is not valid UTF-8 (byte 0xff at header offset 3)");
  msg = open_error("array.safetensors", raw_file("[1, 2]", ""));
  EXPECT_HAS(msg, "array.safetensors: header must be a JSON object, got array");
  msg = open_error("trailing.safetensors", raw_file(std::string("{}\0\0", 4), ""));
  EXPECT_HAS(msg, "trailing.safetensors: header: invalid JSON");
  msg = open_error("deep.safetensors",
                   raw_file(std::string(100000, '[') + std::string(100000, ']'), ""));
  EXPECT_HAS(msg, "deep.safetensors: header: JSON nests deeper than 64 levels");
}

TEST(SafetensorsErrors, MalformedEntries) {
  auto one = [](const std::string& entry) { return raw_file("{\"w\":" + entry + "}", ""); };
  auto msg = open_error("missing.safetensors", one(R"({"shape":[],"data_offsets":[0,0]})"));
  EXPECT_HAS(msg, "missing.safetensors: tensor 'w': required field 'dtype' is missing");
  msg = open_error("no_offsets.safetensors", one(R"({"dtype":"F32","shape":[0]})"));
  EXPECT_HAS(msg, "tensor 'w': required field 'data_offsets' is missing");
  msg = open_error("negative.safetensors",
                   one(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]})"));
  EXPECT_HAS(msg,
             "negative.safetensors: tensor 'w': 'shape' must be an array of non-negative "
             "integers, got array [2,-1]");
  msg = open_error("fraction.safetensors",
                   one(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,0]})"));
  EXPECT_HAS(msg, "'shape' must be an array of non-negative integers, got array [2.5]");
  msg =
      open_error("three.safetensors", one(R"({"dtype":"F32","shape":[0],"data_offsets":[0,0,0]})"));
  EXPECT_HAS(msg,
             "three.safetensors: tensor 'w': 'data_offsets' must be an array of two "
             "non-negative integers, got array [0,0,0]");
  msg = open_error("string.safetensors", one(R"("F32")"));
  EXPECT_HAS(msg, "string.safetensors: tensor 'w': entry must be an object");
}

TEST(SafetensorsErrors, DuplicateNamesAndKeys) {
  auto msg = open_error("dup.safetensors", raw_file("{" + f32_entry("a", "[1]", 0, 4) + "," +
                                                        f32_entry("a", "[1]", 4, 8) + "}",
                                                    std::string(8, 0)));
  EXPECT_HAS(msg, "dup.safetensors: header: tensor 'a' is listed twice");
  msg =
      open_error("dupkey.safetensors",
                 raw_file(R"({"a":{"dtype":"F32","dtype":"I32","shape":[],"data_offsets":[0,4]}})",
                          std::string(4, 0)));
  EXPECT_HAS(msg, "dupkey.safetensors: header: key 'dtype' appears twice in one object");
}

TEST(SafetensorsErrors, MetadataMustMapStringsToStrings) {
  auto msg = open_error("meta_int.safetensors", raw_file(R"({"__metadata__":{"step":12}})", ""));
  EXPECT_HAS(msg,
             "meta_int.safetensors: '__metadata__' value for key 'step' must be a string, "
             "got integer 12");
  msg = open_error("meta_list.safetensors", raw_file(R"({"__metadata__":["pt"]})", ""));
  EXPECT_HAS(msg,
             "meta_list.safetensors: '__metadata__' must be an object mapping strings to "
             "strings, got array");
}

TEST(SafetensorsErrors, MissingFileAndDirectory) {
  auto dir = furlong::testing::scratch_dir();
  auto msg = error_of([&] { SafetensorsFile::open(dir / "nope.safetensors"); });
  EXPECT_HAS(msg, "nope.safetensors: cannot open for reading (No such file or directory)");
  msg = error_of([&] { SafetensorsFile::open(dir); });
  EXPECT_HAS(msg, dir.string() + ": not a regular file");
}

// Opening a FIFO for reading blocks until a writer appears: it must be refused before the open.
// Bounded: if the open hangs, the test fails and then unblocks it by opening the writer side.
TEST(SafetensorsErrors, FifoIsRefusedWithoutBlocking) {
  auto path = furlong::testing::scratch_dir() / "model.safetensors";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto opened = std::async(std::launch::async,
                           [&] { return error_of([&] { SafetensorsFile::open(path); }); });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "opening a FIFO blocked";
    int writer = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (writer >= 0) ::close(writer);
  }
  EXPECT_HAS(opened.get(), path.string() + ": not a regular file");
}

TEST(SafetensorsErrors, DeviceFileIsRefused) {
  EXPECT_HAS(error_of([] { SafetensorsFile::open("/dev/zero"); }), "/dev/zero: not a regular file");
}

}  // namespace
}  // namespace furlong::io
