#include "data/observation_render.h"

#include <algorithm>

#include "tokenizer/jinja/chat_template.h"

namespace furlong::data {
namespace {

// Stands in for the assistant's content; no template treats it specially (no newline, no
// "<think>", no tag).
constexpr std::string_view kMarker = "\x02furlong-assistant-turn\x03";

// The text after the only occurrence of kMarker in `rendered`.
std::string after_marker(const std::string& rendered, const char* which) {
  const size_t at = rendered.find(kMarker);
  FURLONG_CHECK(at != std::string::npos && rendered.find(kMarker, at + 1) == std::string::npos,
                "the chat template rendered the assistant message's content ",
                at == std::string::npos ? "not at all" : "more than once", " (", which,
                "); multi-turn episodes need a template that renders it once, as is");
  return rendered.substr(at + kMarker.size());
}

// The longest prefix of `closing` that `text` ends with.
size_t emitted_prefix(const std::string& text, const std::string& closing) {
  for (size_t k = std::min(text.size(), closing.size()); k > 0; --k) {
    if (text.compare(text.size() - k, k, closing, 0, k) == 0) return k;
  }
  return 0;
}

}  // namespace

ObservationRenderer::ObservationRenderer(const tokenizer::ChatFormatter& chat,
                                         OrderedJson extra_context)
    : chat_(chat), extra_context_(std::move(extra_context)) {}

std::string ObservationRenderer::render(const OrderedJson& history, const std::string& turn_text,
                                        const OrderedJson& observation) const {
  FURLONG_CHECK(history.is_array() && !history.empty(),
                "an episode's history must be a non-empty message list");
  FURLONG_CHECK(observation.is_array() && !observation.empty(),
                "an observation must be a non-empty message list");
  OrderedJson messages = history;
  messages.push_back({{"role", "assistant"}, {"content", std::string(kMarker)}});
  const std::string closing = after_marker(chat_.apply(messages, false, extra_context_), "alone");
  for (const auto& m : observation) messages.push_back(m);
  const std::string next =
      after_marker(chat_.apply(messages, true, extra_context_), "followed by the observation");
  FURLONG_CHECK(next.starts_with(closing), "the chat template closes an assistant message with '",
                closing, "' when it is last, but not when an observation follows (",
                next.substr(0, closing.size() + 20),
                "...): furlong cannot append observations to the generated tokens");
  return next.substr(emitted_prefix(turn_text, closing));
}

}  // namespace furlong::data
