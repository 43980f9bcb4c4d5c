#include "train/sft_data.h"

#include <algorithm>
#include <memory>

#include "core/jsonl.h"
#include "core/log.h"
#include "core/strings.h"
#include "data/prompt_dataset.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::train {
namespace {

struct TextTools {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatFormatter> chat;
};

// The tokenizer (and, when `need_chat`, the chat template) of `dir`, loaded on first use.
TextTools& text_tools(TextTools& tools, const std::filesystem::path& dir, const SftDataOptions& o,
                      bool need_chat, const std::string& where) {
  if (!tools.tokenizer) {
    FURLONG_CHECK(std::filesystem::exists(dir / "tokenizer.json"), where,
                  ": a text row needs a tokenizer, but ", (dir / "tokenizer.json").string(),
                  " does not exist");
    tools.tokenizer =
        std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_directory(dir));
  }
  if (need_chat && !tools.chat) {
    tools.chat = o.chat_template_path.empty()
                     ? std::make_unique<tokenizer::ChatFormatter>(dir)
                     : std::make_unique<tokenizer::ChatFormatter>(dir, o.chat_template_path);
  }
  return tools;
}

// The template variables of a row: --apply-chat-template-kwargs, and row[--tool-key] as tools.
OrderedJson template_context(const JsonlRow& row, const SftDataOptions& o) {
  OrderedJson context = o.chat_template_kwargs;
  auto it = row.value.find(o.tool_key);
  if (it == row.value.end() || it->is_null()) return context;
  OrderedJson tools = *it;
  if (tools.is_string()) {
    tools = parse_ordered_json(tools.get<std::string>(), row.where + " '" + o.tool_key + "'");
  }
  FURLONG_CHECK(tools.is_array(), row.where, ": field '", o.tool_key,
                "' must be a list of tools (or a JSON string holding one), got ",
                json_type_name(tools));
  context["tools"] = std::move(tools);
  return context;
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
        t.chat->apply(messages, /*add_generation_prompt=*/true, template_context(row, o));
    return t.tokenizer->encode(text, /*add_special_tokens=*/false);
  }
  FURLONG_CHECK(prompt.is_string(), row.where, ": field '", o.input_key,
                "' must be a string (or use --apply-chat-template for a list of messages)");
  return t.tokenizer->encode(prompt.get<std::string>(), /*add_special_tokens=*/true);
}

// ----- conversations -----

// The end of each token's text in `decoded`, the decoded ids (their concatenation). A token
// that ends inside a multi-byte character counts as ending before that character.
std::vector<size_t> token_ends(const tokenizer::Tokenizer& tok, const std::vector<int64_t>& ids,
                               std::string& decoded) {
  tokenizer::StreamDecoder stream(tok, /*skip_special_tokens=*/false);
  std::vector<size_t> ends;
  ends.reserve(ids.size());
  for (int64_t id : ids) {
    decoded += stream.push(id);
    ends.push_back(decoded.size());
  }
  decoded += stream.flush();
  return ends;
}

bool trained_turn(const OrderedJson& message) {
  if (message.value("role", OrderedJson()) != "assistant") return false;
  auto it = message.find("step_loss_mask");
  if (it == message.end()) return true;
  return (it->is_boolean() && it->get<bool>()) || (it->is_number() && it->get<double>() == 1.0);
}

void check_messages(const OrderedJson& messages, const std::string& where) {
  FURLONG_CHECK(messages.is_array() && !messages.empty(), where,
                ": a conversation must be a non-empty list of messages, got ",
                json_type_name(messages));
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    FURLONG_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(), where, ": message ",
                  i, " must be an object with a string \"role\"");
  }
}

// The chat template's text of some messages, as decoded tokens (so that the tokenizer's
// normalizer applies to it as to the whole conversation).
struct Renderer {
  const tokenizer::ChatFormatter& chat;
  const tokenizer::Tokenizer& tok;
  const OrderedJson& context;
  std::string operator()(const OrderedJson& messages, bool generation_prompt) const {
    return tok.decode(tok.encode(chat.apply(messages, generation_prompt, context), false));
  }
};

// Where assistant message `i` starts in the decoded conversation: after the messages before it,
// and after as much of the generation prompt that follows them as the conversation holds. That
// is all of it (the role header) for most templates; a prefill only the generation prompt has
// (Qwen3's empty thinking block under enable_thinking=false, absent from earlier turns) is not.
size_t turn_start(const OrderedJson& messages, size_t i, const std::string& decoded,
                  const Renderer& rendered, const std::string& where) {
  FURLONG_CHECK(i > 0, where,
                ": message 0 is an assistant turn; a trained turn needs a message before it (a "
                "system or user message)");
  OrderedJson before = OrderedJson::array();
  for (size_t j = 0; j < i; ++j) before.push_back(messages[j]);
  const std::string history = rendered(before, /*generation_prompt=*/false);
  FURLONG_CHECK(decoded.starts_with(history), where, ": the chat template renders the ", i,
                " messages before assistant message ", i, " differently when later messages ",
                "follow (alone they are no prefix of the whole conversation), so that turn's ",
                "tokens cannot be located");
  const std::string prompted = rendered(before, /*generation_prompt=*/true);
  size_t common = 0;
  while (common < prompted.size() && common < decoded.size() &&
         prompted[common] == decoded[common]) {
    ++common;
  }
  return std::max(common, history.size());
}

// The mask over one assistant turn whose generation prompt ends at byte `start` of the decoded
// text: from the first token that reaches past `start` through the next special token.
void mark_turn(ConversationTokens& out, const std::vector<size_t>& ends, size_t start,
               const tokenizer::Tokenizer& tok, const std::string& where, size_t message) {
  size_t k = 0;
  while (k < ends.size() && ends[k] <= start) ++k;
  for (; k < ends.size(); ++k) {
    out.mask[k] = 1.0f;
    if (tok.is_special(out.ids[k])) return;
  }
  FURLONG_FAIL(where, ": the chat template writes no special token after assistant message ",
               message, ", so where that turn ends is unknown");
}

}  // namespace

ConversationTokens tokenize_conversation(const OrderedJson& messages, const OrderedJson& context,
                                         const tokenizer::ChatFormatter& chat,
                                         const tokenizer::Tokenizer& tok,
                                         const std::string& where) {
  check_messages(messages, where);
  const Renderer rendered{chat, tok, context};
  ConversationTokens out;
  out.ids = tok.encode(chat.apply(messages, /*add_generation_prompt=*/false, context),
                       /*add_special_tokens=*/false);
  out.mask.assign(out.ids.size(), 0.0f);
  std::string decoded;
  const std::vector<size_t> ends = token_ends(tok, out.ids, decoded);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!trained_turn(messages[i])) continue;
    const size_t start = turn_start(messages, i, decoded, rendered, where);
    mark_turn(out, ends, start, tok, where, i);
  }
  return out;
}

namespace {

// A conversation row: the tokens before the first trained token are the prompt.
rl::Sample conversation_sample(const JsonlRow& row, const SftDataOptions& o, TextTools& t) {
  const ConversationTokens c = tokenize_conversation(
      row.value[o.input_key], template_context(row, o), *t.chat, *t.tokenizer, row.where);
  size_t first = 0;
  while (first < c.mask.size() && c.mask[first] == 0.0f) ++first;
  FURLONG_CHECK(first < c.mask.size(), row.where, ": the conversation in '", o.input_key,
                "' has no assistant message to train on (and no '", o.response_key,
                "' field holding a response)");
  rl::Sample s;
  s.tokens = c.ids;
  s.response_length = static_cast<int64_t>(c.ids.size() - first);
  s.loss_mask.assign(c.mask.begin() + static_cast<std::ptrdiff_t>(first), c.mask.end());
  return s;
}

rl::Sample prompt_response_sample(const JsonlRow& row, const SftDataOptions& o, TextTools& t) {
  std::vector<int64_t> prompt = prompt_tokens(row, o, t);
  std::vector<int64_t> response =
      t.tokenizer->encode(json_get<std::string>(row.value, o.response_key, row.where),
                          /*add_special_tokens=*/false);
  if (auto eos = t.tokenizer->eos_token_id()) response.push_back(*eos);
  FURLONG_CHECK(!prompt.empty(), row.where, ": the prompt has no tokens");
  FURLONG_CHECK(!response.empty(), row.where, ": the response has no tokens");
  rl::Sample s;
  s.tokens = prompt;
  s.tokens.insert(s.tokens.end(), response.begin(), response.end());
  s.response_length = static_cast<int64_t>(response.size());
  s.loss_mask.assign(response.size(), 1.0f);
  return s;
}

rl::Sample tokenized_sample(const JsonlRow& row) {
  rl::Sample s;
  s.tokens = json_get<std::vector<int64_t>>(row.value, "prompt_ids", row.where);
  const auto response = json_get<std::vector<int64_t>>(row.value, "response_ids", row.where);
  FURLONG_CHECK(!s.tokens.empty(), row.where, ": the prompt has no tokens");
  FURLONG_CHECK(!response.empty(), row.where, ": the response has no tokens");
  s.tokens.insert(s.tokens.end(), response.begin(), response.end());
  s.response_length = static_cast<int64_t>(response.size());
  s.loss_mask.assign(response.size(), 1.0f);
  return s;
}

std::string row_keys(const JsonlRow& row) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : row.value.items()) keys.push_back(k);
  return keys.empty() ? "none" : join(keys, ", ");
}

rl::Sample row_to_sample(const JsonlRow& row, const SftDataOptions& o,
                         const std::filesystem::path& dir, TextTools& tools) {
  if (row.value.contains("prompt_ids")) return tokenized_sample(row);
  FURLONG_CHECK(row.value.contains(o.input_key), row.where, ": missing the field '", o.input_key,
                "' (set --input-key; the row has keys: ", row_keys(row), ")");
  const bool conversation =
      row.value[o.input_key].is_array() && !row.value.contains(o.response_key);
  auto& t = text_tools(tools, dir, o, conversation || o.apply_chat_template, row.where);
  if (conversation) return conversation_sample(row, o, t);
  FURLONG_CHECK(row.value.contains(o.response_key), row.where, ": missing the response field '",
                o.response_key, "' (set --response-key, or give '", o.input_key,
                "' a list of messages with assistant turns; the row has keys: ", row_keys(row),
                ")");
  return prompt_response_sample(row, o, t);
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
