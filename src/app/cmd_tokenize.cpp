// furlong tokenize: text <-> token ids with a HF tokenizer, and chat rendering.
//   {"text": ...}                       -> adds "input_ids"
//   {"messages": [...]} (+ "tools")     -> with --apply-chat-template adds "text" and "input_ids"
//   {"input_ids": [...]} with --decode  -> adds "text"
// Other fields of each row are passed through unchanged.
#include <filesystem>

#include "app/common.h"
#include "core/log.h"
#include "core/progress.h"
#include "tokenizer/jinja/chat_template.h"

namespace furlong::app {
namespace {

OrderedJson tokenize_row(const JsonlRow& row, const TokenizeOptions& o,
                         const tokenizer::Tokenizer& tok, const tokenizer::ChatFormatter* chat) {
  OrderedJson out = row.value;
  if (o.decode) {
    auto ids = json_get<std::vector<int64_t>>(row.value, "input_ids", row.where);
    for (size_t i = 0; i < ids.size(); ++i) {
      FURLONG_CHECK(ids[i] >= 0 && ids[i] < tok.vocab_size(), row.where, ": input_ids[", i,
                    "] = ", ids[i], " is outside the vocabulary [0, ", tok.vocab_size(), ")");
    }
    out["text"] = tok.decode(ids, o.skip_special_tokens);
    return out;
  }
  if (row.value.contains("messages")) {
    FURLONG_CHECK(o.apply_chat_template, row.where,
                  ": a {\"messages\"} row needs --apply-chat-template");
    const OrderedJson& messages = row.value["messages"];
    FURLONG_CHECK(messages.is_array(), row.where, ": field 'messages' must be a list");
    OrderedJson extra = OrderedJson::object();
    if (row.value.contains("tools")) extra["tools"] = row.value["tools"];
    std::string text;
    try {
      text = chat->apply(messages, o.add_generation_prompt, extra);
    } catch (const Error& e) {
      FURLONG_FAIL(row.where, ": ", e.what());
    }
    out["text"] = text;
    out["input_ids"] = tok.encode(text, /*add_special_tokens=*/false);
    return out;
  }
  FURLONG_CHECK(row.value.contains("text"), row.where,
                ": expected a field \"text\" or \"messages\" (or \"input_ids\" with --decode)");
  out["input_ids"] =
      tok.encode(json_get<std::string>(row.value, "text", row.where), o.add_special_tokens);
  return out;
}

}  // namespace

int run_tokenize(const std::vector<std::string>& args) {
  TokenizeOptions o;
  config::FlagSet flags("furlong tokenize",
                        "Text to token ids (and back with --decode); chat messages through the "
                        "tokenizer's chat template.");
  register_flags(flags, o);
  if (!flags.parse(args)) return 0;
  FURLONG_CHECK(!(o.decode && o.apply_chat_template),
                "--decode and --apply-chat-template cannot be combined");
  LazyTokenizer lazy(o.hf_checkpoint);
  const auto& tok = lazy.get("furlong tokenize");
  std::unique_ptr<tokenizer::ChatFormatter> chat;
  if (o.apply_chat_template) chat = std::make_unique<tokenizer::ChatFormatter>(o.hf_checkpoint);
  auto rows = read_jsonl(o.input);
  JsonlWriter writer(o.output);
  ProgressBar progress("tokenize", static_cast<int64_t>(rows.size()), "rows");
  for (const auto& row : rows) {
    writer.write(tokenize_row(row, o, tok, chat.get()));
    progress.advance();
  }
  progress.finish();
  writer.commit();
  LOG_INFO("wrote ", rows.size(), " rows to ", o.output);
  return 0;
}

}  // namespace furlong::app
