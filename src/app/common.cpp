#include "app/common.h"

#include <ATen/Parallel.h>

#include <cstdlib>

namespace furlong::app {

void apply_runtime_options(const RuntimeOptions& options) {
  FURLONG_CHECK(options.num_threads >= 0, "--num-threads must be >= 0, got ", options.num_threads);
  FURLONG_CHECK(options.num_threads >= 0 && options.num_threads <= (1 << 16),
                "--num-threads must be in [0, 65536], got ", options.num_threads);
  if (options.num_threads > 0) at::set_num_threads(static_cast<int>(options.num_threads));
}

bool is_first_rank_of_launch() {
  for (const char* name : {"RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0' && std::string(value) != "0") return false;
  }
  return true;
}

const tokenizer::Tokenizer& LazyTokenizer::get(const std::string& why) const {
  if (!tokenizer_) {
    FURLONG_CHECK(std::filesystem::exists(dir_ / "tokenizer.json"),
                  (dir_ / "tokenizer.json").string(), ": not found, but ", why,
                  " needs the tokenizer");
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_directory(dir_));
  }
  return *tokenizer_;
}

std::vector<int64_t> row_token_ids(const JsonlRow& row, const LazyTokenizer& tokenizer,
                                   bool add_special_tokens, int64_t vocab_size) {
  bool has_ids = row.value.contains("input_ids");
  bool has_text = row.value.contains("text");
  FURLONG_CHECK(has_ids || has_text, row.where,
                ": expected a field \"input_ids\" (list of token ids) or \"text\"");
  if (!has_ids) {
    auto text = json_get<std::string>(row.value, "text", row.where);
    return tokenizer.get("the {\"text\"} row at " + row.where).encode(text, add_special_tokens);
  }
  auto ids = json_get<std::vector<int64_t>>(row.value, "input_ids", row.where);
  for (size_t i = 0; i < ids.size(); ++i) {
    FURLONG_CHECK(ids[i] >= 0 && (vocab_size <= 0 || ids[i] < vocab_size), row.where,
                  ": input_ids[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab_size,
                  ")");
  }
  return ids;
}

}  // namespace furlong::app
