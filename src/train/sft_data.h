// Supervised fine-tuning data: JSONL rows turned into samples whose loss mask covers what the
// model should learn to write. The path may select rows as RL's --prompt-data does,
// "file.jsonl@[start:end]" (Python slice semantics; data::parse_path_slice). Row shapes:
//   {"<input-key>": [messages]}                              a conversation (miles' and TRL's
//       "messages" rows): rendered whole with the chat template; loss on the assistant turns
//   {"<input-key>": "prompt text" or [messages], "<response-key>": "response text"}
//   {"prompt_ids": [...], "response_ids": [...]}            (already tokenized)
// A conversation is any message list without a <response-key> field; the chat template is used
// whether or not --apply-chat-template is set (miles' SFT rollout does the same). For the
// prompt/response shape, --apply-chat-template renders the prompt (a string becomes one user
// message) with the template and add_generation_prompt, and the response is followed by the EOS
// token; without it, tokens = encode(prompt, special tokens) + encode(response) + EOS. Rows that
// reach the chat template pass row[<tool-key>] (a list, or a JSON string of one) as its tools.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "rl/sample.h"

namespace furlong::tokenizer {
class Tokenizer;
class ChatFormatter;
}  // namespace furlong::tokenizer

namespace furlong::train {

struct SftDataOptions {
  std::string path;  // "file.jsonl" or "file.jsonl@[start:end]"
  std::string input_key = "prompt";
  std::string response_key = "response";
  std::string tool_key = "tools";
  bool apply_chat_template = false;
  std::string chat_template_path;  // --chat-template-path ("" = the tokenizer's template)
  OrderedJson chat_template_kwargs = OrderedJson::object();  // --apply-chat-template-kwargs
  int64_t max_length = 0;  // > 0: drop rows longer than this many tokens (counted, warned)
};

// `tokenizer_dir` is needed unless every row is pre-tokenized.
std::vector<rl::Sample> load_sft_samples(const SftDataOptions& options,
                                         const std::filesystem::path& tokenizer_dir);

// A conversation as SFT trains on it: the tokens of the chat template's rendering of all the
// messages (add_generation_prompt false, tokenized without added special tokens, as
// transformers' apply_chat_template(tokenize=True) does) and a loss mask per token.
struct ConversationTokens {
  std::vector<int64_t> ids;
  std::vector<float> mask;
};

// The mask is 1 on each assistant turn: from where the conversation stops following the
// generation prompt that would precede the turn (the rendering of the messages before it with
// add_generation_prompt: its role header, and any prefill such as Qwen3's empty thinking block
// that the conversation also holds) through the first special token after that (the
// end-of-turn token, e.g. <|im_end|>), and 0 elsewhere: the model learns what it generates in
// that turn, including when to stop. A token that straddles the turn's start is in it. An
// assistant message with "step_loss_mask" other than 1 (miles' field) is not trained on.
// Errors (furlong::Error, naming `where` and the message): a non-list or empty `messages`, a
// message without a string role, an assistant message first (nothing to condition on), a
// template that renders the messages before a turn differently once later ones follow, or no
// special token after a turn. `context` holds extra template variables (tools,
// --apply-chat-template-kwargs).
ConversationTokens tokenize_conversation(const OrderedJson& messages, const OrderedJson& context,
                                         const tokenizer::ChatFormatter& chat,
                                         const tokenizer::Tokenizer& tokenizer,
                                         const std::string& where);

}  // namespace furlong::train
