// tokenizer_config.json nested beyond the JSON depth limit is an error naming the file (it
// used to be parsed without a bound, and a later copy of the value recursed over it).
#include <gtest/gtest.h>

#include <string>

#include "common/test_util.h"
#include "core/files.h"
#include "tokenizer/jinja/chat_template.h"

namespace furlong::tokenizer {
namespace {

TEST(ChatTemplateBounds, DeeplyNestedTokenizerConfigIsAnError) {
  auto dir = furlong::testing::scratch_dir();
  write_file_atomic(dir / "tokenizer_config.json",
                    "{\"chat_template\": \"x\", \"deep\": " + std::string(60000, '[') +
                        std::string(60000, ']') + "}");
  auto msg = furlong::testing::error_of([&] { ChatFormatter formatter(dir); });
  EXPECT_NE(msg.find("tokenizer_config.json: JSON nested deeper than 128 levels"),
            std::string::npos)
      << msg.substr(0, 300);
}

}  // namespace
}  // namespace furlong::tokenizer
