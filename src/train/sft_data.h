// Supervised fine-tuning data: JSONL rows of prompt/response pairs turned into samples whose
// loss mask covers the response. The path may select rows as RL's --prompt-data does,
// "file.jsonl@[start:end]" (Python slice semantics; data::parse_path_slice).
//   {"<input-key>": "prompt text" or [messages], "<response-key>": "response text"}
//   {"prompt_ids": [...], "response_ids": [...]}            (already tokenized)
// With --apply-chat-template the prompt (a string becomes one user message) is rendered with
// the tokenizer's chat template and add_generation_prompt; the response is followed by the EOS
// token. Without it, tokens = encode(prompt, special tokens) + encode(response) + EOS.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "rl/sample.h"

namespace furlong::train {

struct SftDataOptions {
  std::string path;  // "file.jsonl" or "file.jsonl@[start:end]"
  std::string input_key = "prompt";
  std::string response_key = "response";
  bool apply_chat_template = false;
  std::string chat_template_path;  // --chat-template-path ("" = the tokenizer's template)
  OrderedJson chat_template_kwargs = OrderedJson::object();  // --apply-chat-template-kwargs
  int64_t max_length = 0;  // > 0: drop rows longer than this many tokens (counted, warned)
};

// `tokenizer_dir` is needed unless every row is pre-tokenized.
std::vector<rl::Sample> load_sft_samples(const SftDataOptions& options,
                                         const std::filesystem::path& tokenizer_dir);

}  // namespace furlong::train
