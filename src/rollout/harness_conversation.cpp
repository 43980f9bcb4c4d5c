#include "rollout/harness_conversation.h"

#include "core/error.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/jinja/value.h"
#include "tokenizer/tokenizer.h"

namespace furlong::rollout {
namespace {

// A message's content as text: a string, null (""), or a list of text parts (joined).
std::optional<std::string> content_text(const OrderedJson& content, const std::string& where,
                                        std::string& error) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    error = where + ".content must be a string, null or a list of text parts";
    return std::nullopt;
  }
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      error = where + ".content: only parts {\"type\": \"text\", \"text\": string} are accepted";
      return std::nullopt;
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// The tool calls of an assistant message as [{name, arguments}] with arguments parsed from
// their JSON text (kept as the string when it is not JSON): the form two messages are compared in.
OrderedJson normalized_calls(const OrderedJson& message) {
  OrderedJson calls = OrderedJson::array();
  const auto it = message.find("tool_calls");
  if (it == message.end() || !it->is_array()) return calls;
  for (const auto& call : *it) {
    const OrderedJson& fn = call.contains("function") ? call["function"] : call;
    OrderedJson args = fn.value("arguments", OrderedJson());
    if (args.is_string()) {
      OrderedJson parsed = OrderedJson::parse(args.get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) args = std::move(parsed);
    }
    calls.push_back({{"name", fn.value("name", OrderedJson())}, {"arguments", std::move(args)}});
  }
  return calls;
}

// Each message as {role, content (text), tool_calls} for comparison; the messages with text
// content for the template (other fields kept). An error names the message.
bool normalize(const OrderedJson& messages, OrderedJson& held, OrderedJson& rendered,
               std::string& error) {
  held = OrderedJson::array();
  rendered = OrderedJson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      error = where + " must be an object with a string \"role\"";
      return false;
    }
    auto text = content_text(m.value("content", OrderedJson()), where, error);
    if (!text) return false;
    held.push_back({{"role", m["role"]}, {"content", *text}, {"tool_calls", normalized_calls(m)}});
    OrderedJson r = m;
    r["content"] = *text;
    rendered.push_back(std::move(r));
  }
  return true;
}

}  // namespace

std::optional<HarnessChatRequest> parse_harness_chat(const OrderedJson& body, std::string& error) {
  if (!body.is_object()) {
    error = "the request body must be a JSON object";
    return std::nullopt;
  }
  HarnessChatRequest r;
  const auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty()) {
    error = "\"messages\" must be a non-empty list of messages";
    return std::nullopt;
  }
  r.messages = *messages;
  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) {
      error = "\"tools\" must be a list of tool definitions";
      return std::nullopt;
    }
    if (!body["tools"].empty()) r.tools = body["tools"];
  }
  const auto n = body.value("n", OrderedJson(1));
  if (n != OrderedJson(1)) {
    error = "\"n\" must be 1 in an agent session (one turn per request), got " + n.dump();
    return std::nullopt;
  }
  if (body.value("stream", OrderedJson(false)) != OrderedJson(false)) {
    error = "\"stream\": true is not supported in agent sessions; send stream false";
    return std::nullopt;
  }
  const auto choice = body.value("tool_choice", OrderedJson());
  if (!choice.is_null() && choice != "auto") {
    error = "\"tool_choice\" must be \"auto\" (or absent) in agent sessions, got " + choice.dump();
    return std::nullopt;
  }
  for (const char* field : {"max_completion_tokens", "max_tokens"}) {
    const auto v = body.value(field, OrderedJson());
    if (v.is_null()) continue;
    if (!v.is_number_integer() || v.get<int64_t>() < 1) {
      error = std::string("\"") + field + "\" must be an integer >= 1, got " + v.dump();
      return std::nullopt;
    }
    if (!r.max_tokens) r.max_tokens = v.get<int64_t>();
  }
  const auto logprobs = body.value("logprobs", OrderedJson(false));
  if (!logprobs.is_boolean() && !logprobs.is_null()) {
    error = "\"logprobs\" must be true or false, got " + logprobs.dump();
    return std::nullopt;
  }
  r.logprobs = logprobs.is_boolean() && logprobs.get<bool>();
  return r;
}

OrderedJson harness_assistant_message(const data::ParsedTurn& parsed, const std::string& text,
                                      int64_t turn) {
  OrderedJson message = {{"role", "assistant"}};
  if (parsed.malformed() || parsed.calls.empty()) {
    message["content"] = text;
    return message;
  }
  message["content"] = parsed.content.empty() ? OrderedJson() : OrderedJson(parsed.content);
  OrderedJson calls = OrderedJson::array();
  for (size_t i = 0; i < parsed.calls.size(); ++i) {
    const auto& call = parsed.calls[i];
    calls.push_back(
        {{"id", "call_" + std::to_string(turn) + "_" + std::to_string(i)},
         {"type", "function"},
         {"function",
          {{"name", call.name},
           {"arguments", tokenizer::jinja::to_json(tokenizer::jinja::from_json(call.arguments),
                                                   tokenizer::jinja::JsonDumpOptions{})}}}});
  }
  message["tool_calls"] = std::move(calls);
  return message;
}

HarnessConversation::HarnessConversation(const tokenizer::ChatFormatter& chat,
                                         const tokenizer::Tokenizer& tokenizer,
                                         OrderedJson template_context)
    : chat_(chat), tokenizer_(tokenizer), template_context_(std::move(template_context)) {}

OrderedJson HarnessConversation::render_context(const OrderedJson& tools) const {
  OrderedJson context = template_context_;
  if (!tools.is_null()) context["tools"] = tools;
  return context;
}

HarnessConversation::Next HarnessConversation::next(const HarnessChatRequest& request) {
  OrderedJson held, rendered;
  std::string error;
  FURLONG_CHECK(normalize(request.messages, held, rendered, error), error);
  pending_tools_ = request.tools;
  Next out;
  // Extends: the session's conversation, then only tool/user messages, under the same tools.
  bool extends = started_ && request.tools == tools_ && held.size() > held_.size();
  for (size_t i = 0; extends && i < held.size(); ++i) {
    extends = i < held_.size() ? held[i] == held_[i]
                               : held[i]["role"] == "tool" || held[i]["role"] == "user";
  }
  if (extends) {
    OrderedJson added = OrderedJson::array();
    for (size_t i = held_.size(); i < held.size(); ++i) added.push_back(rendered[i]);
    const data::ObservationRenderer renderer(chat_, render_context(tools_));
    const std::string delta =
        renderer.render(OrderedJson(rendered_.begin(), rendered_.end() - 1), last_raw_text_, added);
    out.restart = false;
    out.ids = tokenizer_.encode(delta, /*add_special_tokens=*/false);
    pending_held_ = std::move(held);
    pending_rendered_ = rendered_;
    for (auto& m : added) pending_rendered_.push_back(std::move(m));
    return out;
  }
  out.diverged = started_;
  const std::string prompt =
      chat_.apply(rendered, /*add_generation_prompt=*/true, render_context(request.tools));
  out.ids = tokenizer_.encode(prompt, /*add_special_tokens=*/false);
  pending_held_ = std::move(held);
  pending_rendered_ = std::move(rendered);
  return out;
}

void HarnessConversation::record_turn(const OrderedJson& message, const std::string& text,
                                      const std::string& raw_text) {
  OrderedJson held, rendered;
  std::string error;
  FURLONG_CHECK(normalize(OrderedJson::array({message}), held, rendered, error), error);
  held_ = std::move(pending_held_);
  held_.push_back(held[0]);
  rendered_ = std::move(pending_rendered_);
  rendered_.push_back({{"role", "assistant"}, {"content", text}});
  tools_ = std::move(pending_tools_);
  last_raw_text_ = raw_text;
  last_answer_ = message;
  started_ = true;
}

}  // namespace furlong::rollout
