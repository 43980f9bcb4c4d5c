// The tokens furlong appends between two assistant turns of a multi-turn episode: the
// observation messages (tool results, user turns) rendered by the chat template, followed by
// the next assistant generation prompt, exactly as the template renders them when the whole
// conversation is rendered at once.
//
// How: the conversation so far plus an assistant message holding a marker is rendered twice,
// alone (add_generation_prompt false) and followed by the observation messages (true). The
// text after the marker in the first render is the assistant message's closing (Qwen3:
// "<|im_end|>\n"); in the second, the closing followed by the observation and the generation
// prompt. The model has already produced the start of the closing when it stopped on its end
// token (Qwen3: "<|im_end|>"), so that part is left out. The rest is what gets appended.
// The rendering of the earlier messages never reaches the tokens: they are the ones the model
// saw, as generated. (Qwen3's template drops the reasoning of assistant turns before the last
// user message when it re-renders a whole conversation; the appended tokens do not change it.)
#pragma once

#include <string>

#include "core/json_util.h"

namespace furlong::tokenizer {
class ChatFormatter;
}

namespace furlong::data {

class ObservationRenderer {
 public:
  // `extra_context`: the template variables the prompt was rendered with (tools,
  // --apply-chat-template-kwargs). The formatter must outlive the renderer.
  ObservationRenderer(const tokenizer::ChatFormatter& chat, OrderedJson extra_context);

  // The text to append after the assistant turn whose decoded text (special tokens kept) is
  // `turn_text`. `history` is the conversation before that turn (the prompt's messages and
  // earlier turns and observations); `observation` a non-empty list of {role, content}
  // messages. A furlong::Error when the template does not render the conversation as an
  // extension of it (the closing of an assistant message changes when messages follow).
  std::string render(const OrderedJson& history, const std::string& turn_text,
                     const OrderedJson& observation) const;

 private:
  const tokenizer::ChatFormatter& chat_;
  OrderedJson extra_context_;
};

}  // namespace furlong::data
