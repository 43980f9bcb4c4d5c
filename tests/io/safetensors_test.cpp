// Safetensors reader/writer round trips and the properties the writer promises: layout of
// the reference writer, zero-copy views that keep the mapping alive, aligned copies for
// unaligned foreign files, atomic replacement.
#include <gtest/gtest.h>

#include <map>
#include "common/test_util.h"
#include "core/json_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace furlong::io {
namespace {

using testing::all_dtypes;
using testing::error_of;
using testing::make_tensor;
using testing::raw_file;
using testing::read_bytes;
using testing::same_bytes;
using testing::write_bytes;

size_t count_entries(const std::filesystem::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

TEST(SafetensorsRoundTrip, EveryDtypeWithMatrixScalarAndEmptyShapes) {
  auto dir = furlong::testing::scratch_dir();
  NamedTensors tensors;
  int64_t seed = 0;
  for (auto dtype : all_dtypes()) {
    std::string name = dtype_to_safetensors(dtype);
    tensors.emplace_back("matrix." + name, make_tensor(dtype, {3, 5}, ++seed));
    tensors.emplace_back("scalar." + name, make_tensor(dtype, {}, ++seed));
    tensors.emplace_back("empty." + name, make_tensor(dtype, {0, 4}, ++seed));
    tensors.emplace_back("zero_dims." + name, make_tensor(dtype, {2, 0, 3}, ++seed));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  save_safetensors(dir / "all.safetensors", tensors, metadata);

  auto file = SafetensorsFile::open(dir / "all.safetensors");
  EXPECT_EQ(file->metadata(), metadata);
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    SCOPED_TRACE(name);
    at::Tensor actual = file->tensor(name);
    EXPECT_TRUE(same_bytes(actual, expected));
    EXPECT_EQ(actual.dim(), expected.dim());
    const TensorInfo* info = file->find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, expected.scalar_type());
    EXPECT_EQ(info->shape, expected.sizes().vec());
  }
}

TEST(SafetensorsRoundTrip, NonContiguousInputsAreSavedInLogicalOrder) {
  auto dir = furlong::testing::scratch_dir();
  at::Tensor base = make_tensor(at::kFloat, {6, 8}, 3);
  NamedTensors tensors = {
      {"transposed", base.t()},
      {"strided_slice", base.slice(1, 1, 8, 3)},
      {"expanded", make_tensor(at::kBFloat16, {1, 5}, 4).expand({4, 5})},
      {"column", base.select(1, 2)},
  };
  for (const auto& [name, t] : tensors) ASSERT_FALSE(t.is_contiguous()) << name;
  save_safetensors(dir / "views.safetensors", tensors);
  auto file = SafetensorsFile::open(dir / "views.safetensors");
  for (const auto& [name, expected] : tensors) {
    EXPECT_TRUE(same_bytes(file->tensor(name), expected.contiguous())) << name;
  }
  EXPECT_TRUE(file->metadata().empty());
}

TEST(SafetensorsLayout, FollowsReferenceWriterPaddingOrderAndAlignment) {
  auto dir = furlong::testing::scratch_dir();
  NamedTensors tensors = {
      {"b.bool", make_tensor(at::kBool, {3}, 1)},  {"a.f16", make_tensor(at::kHalf, {3}, 2)},
      {"c.i64", make_tensor(at::kLong, {3}, 3)},   {"a.i8", make_tensor(at::kChar, {5}, 4)},
      {"z.f32", make_tensor(at::kFloat, {1}, 5)},  {"y.bf16", make_tensor(at::kBFloat16, {3}, 6)},
      {"x.f64", make_tensor(at::kDouble, {2}, 7)}, {"a.f32", make_tensor(at::kFloat, {3}, 8)},
  };
  save_safetensors(dir / "layout.safetensors", tensors, {{"format", "pt"}});
  std::string bytes = read_bytes(dir / "layout.safetensors");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint8_t(bytes[i]);
  EXPECT_EQ(header_size % 8, 0u);
  std::string header = bytes.substr(8, header_size);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},\"c.i64\":{\"dtype\":\"I64\","
                         "\"shape\":[3],\"data_offsets\":[0,24]}",
                         0),
            0u)
      << header;
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));

  auto file = SafetensorsFile::open(dir / "layout.safetensors");
  std::vector<std::string> order;
  for (const auto& info : file->tensors()) {
    order.push_back(info.name);
    EXPECT_EQ(info.begin % c10::elementSize(info.dtype), 0u) << info.name;
  }
  EXPECT_EQ(order, (std::vector<std::string>{"c.i64", "x.f64", "a.f32", "z.f32", "y.bf16", "a.f16",
                                             "a.i8", "b.bool"}));
}

TEST(SafetensorsReader, ViewsAreZeroCopyAndKeepTheMappingAlive) {
  auto dir = furlong::testing::scratch_dir();
  at::Tensor expected = make_tensor(at::kFloat, {16, 16}, 9);
  save_safetensors(dir / "w.safetensors", {{"w", expected}});
  auto file = SafetensorsFile::open(dir / "w.safetensors");
  at::Tensor first = file->tensor("w");
  EXPECT_EQ(first.data_ptr(), file->tensor("w").data_ptr());  // a view, not a copy
  file.reset();
  std::filesystem::remove(dir / "w.safetensors");
  EXPECT_TRUE(same_bytes(first, expected));
  EXPECT_TRUE(first.clone().add_(1).sub_(1).equal(expected));
}

TEST(SafetensorsReader, UnalignedTensorsAreReturnedAsAlignedCopies) {
  auto dir = furlong::testing::scratch_dir();
  // The data buffer starts at file offset 8 + N: an odd header length N leaves every tensor
  // misaligned in the (page-aligned) mapping.
  at::Tensor f32 = make_tensor(at::kFloat, {3}, 1);
  at::Tensor f64 = make_tensor(at::kDouble, {2}, 2);
  std::string data = std::string(static_cast<const char*>(f64.const_data_ptr()), 16) +
                     std::string(static_cast<const char*>(f32.const_data_ptr()), 12);
  std::string header = R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                       R"("f":{"dtype":"F32","shape":[3],"data_offsets":[16,28]}})";
  if (header.size() % 2 == 0) header += " ";
  write_bytes(dir / "odd.safetensors", raw_file(header, data));
  auto file = SafetensorsFile::open(dir / "odd.safetensors");
  for (const auto& [name, expected] : {std::pair{"d", f64}, std::pair{"f", f32}}) {
    at::Tensor t = file->tensor(name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.const_data_ptr()) % t.element_size(), 0u) << name;
    EXPECT_TRUE(same_bytes(t, expected)) << name;
  }
}

TEST(SafetensorsReader, FileWithNoTensorsAndNullMetadata) {
  auto dir = furlong::testing::scratch_dir();
  write_bytes(dir / "empty.safetensors", raw_file("{}      ", ""));
  EXPECT_TRUE(SafetensorsFile::open(dir / "empty.safetensors")->tensors().empty());
  write_bytes(dir / "null.safetensors", raw_file(R"({"__metadata__":null})", ""));
  EXPECT_TRUE(SafetensorsFile::open(dir / "null.safetensors")->metadata().empty());
  save_safetensors(dir / "written.safetensors", {});
  EXPECT_EQ(read_bytes(dir / "written.safetensors"), raw_file("{}      ", ""));
}

TEST(SafetensorsReader, UnknownTensorNameNamesFileAndSuggestsCloseMatch) {
  auto dir = furlong::testing::scratch_dir();
  save_safetensors(dir / "m.safetensors", {{"model.norm.weight", at::ones({4})}});
  auto file = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(file->find("model.norm.weights"), nullptr);
  auto msg = error_of([&] { file->tensor("model.norm.weights"); });
  EXPECT_HAS(msg, "m.safetensors: no tensor named 'model.norm.weights'");
  EXPECT_HAS(msg, "did you mean 'model.norm.weight'?");
}

TEST(SafetensorsWriter, ReplacesAtomicallyWhileOldViewsStayValid) {
  auto dir = furlong::testing::scratch_dir();
  at::Tensor old_value = make_tensor(at::kFloat, {8}, 1);
  save_safetensors(dir / "w.safetensors", {{"w", old_value}});
  at::Tensor old_view = SafetensorsFile::open(dir / "w.safetensors")->tensor("w");
  at::Tensor new_value = make_tensor(at::kFloat, {8}, 2);
  save_safetensors(dir / "w.safetensors", {{"w", new_value}});
  EXPECT_TRUE(same_bytes(old_view, old_value));
  EXPECT_TRUE(same_bytes(SafetensorsFile::open(dir / "w.safetensors")->tensor("w"), new_value));
  EXPECT_EQ(count_entries(dir), 1u);
}

TEST(SafetensorsWriter, RejectsBadInputsAndKeepsThePreviousFile) {
  auto dir = furlong::testing::scratch_dir();
  auto path = dir / "w.safetensors";
  save_safetensors(path, {{"w", at::ones({2})}});
  const std::string before = read_bytes(path);

  auto msg = error_of([&] {
    save_safetensors(path, {{"a", at::ones({2})}, {"a", at::ones({3})}});
  });
  EXPECT_HAS(msg, "w.safetensors: tensor name 'a' is used twice");
  msg = error_of([&] { save_safetensors(path, {{"__metadata__", at::ones({2})}}); });
  EXPECT_HAS(msg, "'__metadata__' is reserved");
  msg = error_of([&] { save_safetensors(path, {{"c", at::ones({2}, at::kComplexFloat)}}); });
  EXPECT_HAS(msg, "w.safetensors: tensor 'c': dtype ComplexFloat cannot be stored");
  msg = error_of([&] { save_safetensors(path, {{"u", at::Tensor()}}); });
  EXPECT_HAS(msg, "tensor 'u': tensor is undefined");
  msg = error_of([&] { save_safetensors(path, {{"m", at::ones({2}, at::device(at::kMeta))}}); });
  EXPECT_HAS(msg, "tensor 'm': a meta tensor has no data");
  msg = error_of([&] { save_safetensors(path, {{std::string("bad\xff"), at::ones({2})}}); });
  EXPECT_HAS(msg, "not valid UTF-8");

  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(count_entries(dir), 1u);
  msg = error_of([&] { save_safetensors(dir / "missing" / "x.safetensors", {}); });
  EXPECT_HAS(msg, "missing/x.safetensors.tmp");
  EXPECT_HAS(msg, "cannot create");
}

TEST(SafetensorsDtypes, StringsMapBothWaysAndUnsupportedOnesAreNamed) {
  for (auto dtype : all_dtypes()) {
    EXPECT_EQ(dtype_from_safetensors(dtype_to_safetensors(dtype), "x"), dtype);
  }
  EXPECT_EQ(dtype_to_safetensors(at::kBFloat16), "BF16");
  auto msg = error_of([] { dtype_from_safetensors("F8_E4M3", "f.safetensors: tensor 'w'"); });
  EXPECT_HAS(msg, "f.safetensors: tensor 'w': unsupported dtype 'F8_E4M3'");
  EXPECT_HAS(msg, "BF16");
  msg = error_of([] { dtype_from_safetensors("float32", "f.safetensors"); });
  EXPECT_HAS(msg, "f.safetensors: unknown dtype 'float32'");
  msg = error_of([] { dtype_to_safetensors(at::kComplexDouble); });
  EXPECT_HAS(msg, "dtype ComplexDouble cannot be stored");
}

}  // namespace
}  // namespace furlong::io
