// Helpers shared by the app's subcommands.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.h"
#include "core/jsonl.h"
#include "tokenizer/tokenizer.h"

namespace furlong::app {

void apply_runtime_options(const RuntimeOptions& options);

// True unless the launch environment names this process a rank other than 0 (RANK from
// torchrun / furlong launch, SLURM_PROCID under srun): lines meant once per run log here.
bool is_first_rank_of_launch();

// Loads <dir>/tokenizer.json the first time a row needs it, with an error that says why it is
// needed when the directory has none.
class LazyTokenizer {
 public:
  explicit LazyTokenizer(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const tokenizer::Tokenizer& get(const std::string& why) const;

 private:
  std::filesystem::path dir_;
  mutable std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

// The token ids of a JSONL row: {"input_ids": [...]} (checked against vocab_size when > 0) or
// {"text": ...} (encoded with the tokenizer). When both are present (e.g. rows written by
// `furlong tokenize`), input_ids are used.
std::vector<int64_t> row_token_ids(const JsonlRow& row, const LazyTokenizer& tokenizer,
                                   bool add_special_tokens, int64_t vocab_size);

}  // namespace furlong::app
