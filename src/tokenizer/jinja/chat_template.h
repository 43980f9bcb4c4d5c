// Chat templates: a Jinja subset interpreter good enough to render the chat_template of real
// HF tokenizers (Qwen2/Qwen3, Llama 3) byte-identically to transformers' apply_chat_template.
// A construct outside the subset is a furlong::Error that names it and where it is.
//
// Values are JSON. Objects must keep their key order (Python dicts do, and `tojson`/`items()`
// expose it), so the interface takes nlohmann::ordered_json; a nlohmann::json argument converts
// implicitly but arrives with its keys sorted.
//
// Outside the subset (rejected when parsing, with origin:line:column): the tags extends, block,
// include, import, from, autoescape, do, trans; recursive for loops; *args/**kwargs in calls;
// the filters and tests jinja2 has that filters.cpp/predicates.cpp do not list (e.g. wordwrap,
// truncate, groupby, urlize, escaped).
//
// ChatTemplate and ChatFormatter are immutable once built: render()/apply() may run
// concurrently from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace furlong::tokenizer {

// Bounds that keep a hostile or buggy template from hanging or exhausting memory; exceeding
// one is a furlong::Error.
struct ChatTemplateLimits {
  int64_t max_steps = 20'000'000;  // statements + expressions evaluated per render
  size_t max_output_bytes = size_t{64} << 20;
  int max_call_depth = 200;  // nested macro calls
};

class ChatTemplate {
 public:
  // Parses the template once; `origin` names its source in errors
  // (e.g. "Qwen3/tokenizer_config.json:chat_template").
  static ChatTemplate parse(const std::string& source, const std::string& origin);
  // The default template of a tokenizer directory, found as transformers finds it:
  // chat_template.jinja if present, else tokenizer_config.json "chat_template" (a string, or a
  // list of {name, template} where "default" is used).
  static ChatTemplate from_tokenizer_dir(const std::filesystem::path& dir);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the given variables (messages, add_generation_prompt, tools, bos_token, ...),
  // in the environment transformers uses (trim_blocks, lstrip_blocks, loopcontrols, its tojson,
  // raise_exception, strftime_now, namespace). No preprocessing of messages happens here.
  std::string render(const nlohmann::ordered_json& context,
                     const ChatTemplateLimits& limits = {}) const;

  const std::string& origin() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A tokenizer directory's chat template(s) and special tokens, loaded once; apply() prepares
// the context exactly as transformers' apply_chat_template does.
class ChatFormatter {
 public:
  explicit ChatFormatter(const std::filesystem::path& tokenizer_dir);
  // The template of the Jinja file `template_path` (miles' --chat-template-path) replaces the
  // directory's template(s), as setting transformers' tokenizer.chat_template does; special
  // tokens still come from the directory.
  ChatFormatter(const std::filesystem::path& tokenizer_dir,
                const std::filesystem::path& template_path);

  // Messages: a non-empty array of objects. Keys whose value is null are dropped, and
  // reasoning under "reasoning_content"/"thinking"/"reasoning" is copied to both
  // "thinking" and "reasoning_content" (transformers 5 does both). extra_context keys are
  // template variables (tools, documents, enable_thinking, ...); they override special tokens.
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const nlohmann::ordered_json& extra_context = nlohmann::ordered_json::object(),
                    const ChatTemplateLimits& limits = {}) const;

  // bos_token, eos_token, ... as the template sees them (only the ones that are set).
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  std::map<std::string, ChatTemplate> templates_;  // by name; a single template is "default"
  nlohmann::ordered_json special_tokens_;
};

// What transformers' apply_chat_template(messages, tokenize=False, add_generation_prompt=...,
// **extra_context) returns for a tokenizer directory. Loads the directory on every call; use
// ChatFormatter to render many conversations.
std::string apply_chat_template(
    const std::filesystem::path& tokenizer_dir, const nlohmann::ordered_json& messages,
    bool add_generation_prompt,
    const nlohmann::ordered_json& extra_context = nlohmann::ordered_json::object());

}  // namespace furlong::tokenizer
