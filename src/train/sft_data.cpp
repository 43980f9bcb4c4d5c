#include "train/sft_data.h"

#include <memory>

#include "core/jsonl.h"
#include "core/log.h"
#include "data/prompt_dataset.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::train {
namespace {

struct TextTools {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatFormatter> chat;
};

TextTools& text_tools(TextTools& tools, const std::filesystem::path& dir, const SftDataOptions& o,
                      const std::string& where) {
  const bool chat = o.apply_chat_template;
  if (!tools.tokenizer) {
    FURLONG_CHECK(std::filesystem::exists(dir / "tokenizer.json"), where,
                  ": a text row needs a tokenizer, but ", (dir / "tokenizer.json").string(),
                  " does not exist");
    tools.tokenizer =
        std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_directory(dir));
  }
  if (chat && !tools.chat) {
    tools.chat = o.chat_template_path.empty()
                     ? std::make_unique<tokenizer::ChatFormatter>(dir)
                     : std::make_unique<tokenizer::ChatFormatter>(dir, o.chat_template_path);
  }
  return tools;
}

std::vector<int64_t> prompt_tokens(const JsonlRow& row, const SftDataOptions& o, TextTools& t) {
  const auto& prompt = row.value[o.input_key];
  if (o.apply_chat_template) {
    OrderedJson messages = prompt;
    if (prompt.is_string()) {
      messages = OrderedJson::array({{{"role", "user"}, {"content", prompt}}});
    }
    FURLONG_CHECK(messages.is_array(), row.where, ": field '", o.input_key,
                  "' must be a string or a list of messages");
    std::string text =
        t.chat->apply(messages, /*add_generation_prompt=*/true, o.chat_template_kwargs);
    return t.tokenizer->encode(text, /*add_special_tokens=*/false);
  }
  FURLONG_CHECK(prompt.is_string(), row.where, ": field '", o.input_key,
                "' must be a string (or use --apply-chat-template for a list of messages)");
  return t.tokenizer->encode(prompt.get<std::string>(), /*add_special_tokens=*/true);
}

rl::Sample row_to_sample(const JsonlRow& row, const SftDataOptions& o,
                         const std::filesystem::path& dir, TextTools& tools) {
  rl::Sample s;
  std::vector<int64_t> prompt, response;
  if (row.value.contains("prompt_ids")) {
    prompt = json_get<std::vector<int64_t>>(row.value, "prompt_ids", row.where);
    response = json_get<std::vector<int64_t>>(row.value, "response_ids", row.where);
  } else {
    FURLONG_CHECK(row.value.contains(o.input_key), row.where, ": missing the prompt field '",
                  o.input_key, "' (set --input-key)");
    FURLONG_CHECK(row.value.contains(o.response_key), row.where, ": missing the response field '",
                  o.response_key, "' (set --response-key)");
    auto& t = text_tools(tools, dir, o, row.where);
    prompt = prompt_tokens(row, o, t);
    response = t.tokenizer->encode(json_get<std::string>(row.value, o.response_key, row.where),
                                   /*add_special_tokens=*/false);
    if (auto eos = t.tokenizer->eos_token_id()) response.push_back(*eos);
  }
  FURLONG_CHECK(!prompt.empty(), row.where, ": the prompt has no tokens");
  FURLONG_CHECK(!response.empty(), row.where, ": the response has no tokens");
  s.tokens = prompt;
  s.tokens.insert(s.tokens.end(), response.begin(), response.end());
  s.response_length = static_cast<int64_t>(response.size());
  s.loss_mask.assign(response.size(), 1.0f);
  return s;
}

}  // namespace

std::vector<rl::Sample> load_sft_samples(const SftDataOptions& o,
                                         const std::filesystem::path& tokenizer_dir) {
  TextTools tools;
  std::vector<rl::Sample> samples;
  int64_t dropped = 0;
  // "file@[a:b]" selects rows as --prompt-data does for RL (one parser for both).
  const data::PathSlice slice = data::parse_path_slice(o.path);
  const std::vector<JsonlRow> rows = read_jsonl(slice.file);
  const auto [begin, end] = slice.range(static_cast<int64_t>(rows.size()));
  FURLONG_CHECK(begin < end, "--prompt-data '", o.path, "' selects no rows out of ", rows.size());
  for (int64_t r = begin; r < end; ++r) {
    const JsonlRow& row = rows[r];
    auto s = row_to_sample(row, o, tokenizer_dir, tools);
    if (o.max_length > 0 && static_cast<int64_t>(s.tokens.size()) > o.max_length) {
      ++dropped;
      continue;
    }
    s.index = static_cast<int64_t>(samples.size());
    s.group_index = s.index;
    rl::validate_sample(s, row.where);
    samples.push_back(std::move(s));
  }
  if (dropped > 0) {
    LOG_WARN(o.path, ": dropped ", dropped, " rows longer than --max-length ", o.max_length);
  }
  FURLONG_CHECK(!samples.empty(), o.path, ": no usable rows");
  return samples;
}

}  // namespace furlong::train
