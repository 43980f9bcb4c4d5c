// Bounds on what hostile input can cost the tokenizer: per-thread buffers after a huge piece
// (a server keeps one set per handler thread) and tokenizer.json nested beyond the JSON depth
// limit.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "common/test_util.h"
#include "core/files.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

namespace furlong::tokenizer {
namespace {

using furlong::testing::error_of;

TEST(TokenizerBounds, ThreadBuffersAreReleasedAfterAHugePiece) {
  Tokenizer tok = Tokenizer::from_directory(furlong::testing::tokenizer_dir("qwen3"));
  // One pre-tokenized piece of 2 MB (letters only): its merge buffers are ~8 MB of ids alone.
  std::string huge(2 << 20, 'a');
  size_t retained = 0;
  std::thread handler([&] {
    auto ids = tok.encode(huge, /*add_special_tokens=*/false);
    EXPECT_FALSE(ids.empty());
    retained = bpe_thread_scratch_bytes();
  });
  handler.join();
  EXPECT_LE(retained, size_t{3} << 20) << "bytes kept by the thread after encoding";
  // Ordinary text still encodes the same after the buffers were dropped.
  EXPECT_EQ(tok.encode("hello world", false), tok.encode("hello world", false));
}

TEST(TokenizerBounds, DeeplyNestedTokenizerJsonIsAnError) {
  auto dir = furlong::testing::scratch_dir();
  auto path = dir / "tokenizer.json";
  write_file_atomic(path, "{\"model\": " + std::string(60000, '[') + std::string(60000, ']') + "}");
  auto msg = error_of([&] { Tokenizer::from_files(path, ""); });
  EXPECT_NE(msg.find(path.string() + ": JSON nested deeper than 128 levels"), std::string::npos)
      << msg.substr(0, 300);
}

}  // namespace
}  // namespace furlong::tokenizer
