// Chat templates: a Jinja subset interpreter good enough to render the chat_template of real
// HF tokenizers (Qwen2/Qwen3, Llama 3) byte-identically to transformers' apply_chat_template.
// A construct outside the subset is a furlong::Error that names it and where it is.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace furlong::tokenizer {

class ChatTemplate {
 public:
  // Parses the template once; `origin` names its source in errors
  // (e.g. "Qwen3/tokenizer_config.json:chat_template").
  static ChatTemplate parse(const std::string& source, const std::string& origin);
  // The template of a tokenizer directory: tokenizer_config.json "chat_template" (a string, or a
  // list of {name, template} where "default" is used), else chat_template.jinja.
  static ChatTemplate from_tokenizer_dir(const std::filesystem::path& dir);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the given variables (messages, add_generation_prompt, tools, bos_token, ...).
  std::string render(const nlohmann::json& context) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What transformers' apply_chat_template(messages, tokenize=False, add_generation_prompt=...)
// returns for a tokenizer directory: the template rendered with messages, tools (if given),
// add_generation_prompt and the special tokens of tokenizer_config.json.
std::string apply_chat_template(const std::filesystem::path& tokenizer_dir,
                                const nlohmann::json& messages, bool add_generation_prompt,
                                const nlohmann::json& extra_context = nlohmann::json::object());

}  // namespace furlong::tokenizer
