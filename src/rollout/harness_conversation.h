// One agent-harness session's conversation (--agent-harness-url, docs/agents.md "Agent
// harnesses"): the chat-completion requests a harness sends on its session, checked against
// what the session holds, and the tokens each turn is generated from.
//
// Exact tokens across turns. The session keeps the conversation as the harness has seen it: the
// first request's messages, then per turn the assistant message furlong answered with and the
// messages the harness added after it. A request extends the session when its messages begin
// with exactly that conversation (compared on role, text content and tool calls; ids, names and
// null fields are ignored) and add only tool or user messages, with the same tools. Then the next
// turn is generated from the session's tokens (as generated, never re-tokenized) followed by the
// added messages rendered as an observation (data/observation_render.h). Any other request
// diverges: its messages are rendered and tokenized afresh as a new prompt, and the runner says
// what becomes of the turns before (--agent-harness-on-divergence).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "data/observation_render.h"
#include "data/tool_calls.h"

namespace furlong::tokenizer {
class ChatFormatter;
class Tokenizer;
}  // namespace furlong::tokenizer

namespace furlong::rollout {

// The fields of a /v1/chat/completions body that a harness session honours.
struct HarnessChatRequest {
  OrderedJson messages;               // as sent, key order kept
  OrderedJson tools;                  // null when none are given
  std::optional<int64_t> max_tokens;  // max_completion_tokens, or max_tokens
  bool logprobs = false;
};

// Parses a chat-completions body; nullopt with `error` (naming the field) for what a session
// cannot honour: n other than 1, stream, a tool_choice other than auto, non-text content parts.
// Sampling fields (temperature, top_p, seed, ...) are accepted and ignored: the rollout's own
// sampling parameters apply.
std::optional<HarnessChatRequest> parse_harness_chat(const OrderedJson& body, std::string& error);

// The assistant message furlong answers a turn with, in OpenAI's form: content (the text before
// the first tool call; null when empty and there are calls) and tool_calls with ids
// "call_<turn>_<i>" and arguments as Python's json.dumps writes them (what a Qwen3-style
// template renders for an arguments object). A malformed call leaves the whole text as content.
OrderedJson harness_assistant_message(const data::ParsedTurn& parsed, const std::string& text,
                                      int64_t turn);

class HarnessConversation {
 public:
  // `template_context`: the chat template variables of the run (--apply-chat-template-kwargs);
  // each request's tools are added to it. The formatter and tokenizer must outlive this.
  HarnessConversation(const tokenizer::ChatFormatter& chat, const tokenizer::Tokenizer& tokenizer,
                      OrderedJson template_context);

  struct Next {
    // True: `ids` is a whole prompt (the session's first request, or one that diverged);
    // false: `ids` are the observation tokens to append to the session's sequence.
    bool restart = true;
    bool diverged = false;  // restart after a turn: the history did not extend the session's
    std::vector<int64_t> ids;
  };
  // The tokens the request's turn is generated from. Nothing changes until record_turn().
  // furlong::Error when the chat template cannot render the request.
  Next next(const HarnessChatRequest& request);
  // Commits the request of the last next() and the turn generated for it: `message` as answered
  // (harness_assistant_message), `text` the turn decoded without special tokens, `raw_text`
  // with them (the observation renderer's input).
  void record_turn(const OrderedJson& message, const std::string& text,
                   const std::string& raw_text);
  // The conversation as the template would render it (assistant turns as their text).
  const OrderedJson& messages() const { return rendered_; }
  // The message of the last record_turn(), as answered.
  const OrderedJson& last_answer() const { return last_answer_; }

 private:
  OrderedJson render_context(const OrderedJson& tools) const;

  const tokenizer::ChatFormatter& chat_;
  const tokenizer::Tokenizer& tokenizer_;
  OrderedJson template_context_;
  bool started_ = false;
  OrderedJson tools_;                            // the session's tools (null: none)
  OrderedJson held_ = OrderedJson::array();      // normalized, through the last answered turn
  OrderedJson rendered_ = OrderedJson::array();  // the same, as the template renders it
  std::string last_raw_text_;
  OrderedJson last_answer_;
  // The request of the last next(), committed by record_turn.
  OrderedJson pending_held_, pending_rendered_, pending_tools_;
};

}  // namespace furlong::rollout
