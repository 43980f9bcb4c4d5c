// ChatTemplate (parse once, render many) and the tokenizer-directory front end that mirrors
// transformers 5's apply_chat_template: which template is chosen, which special tokens the
// template sees, and how messages are normalized before rendering.
#include "tokenizer/jinja/chat_template.h"

#include <algorithm>

#include "core/error.h"
#include "core/files.h"
#include "core/json_util.h"
#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/parser.h"

namespace furlong::tokenizer {
namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

struct ChatTemplate::Impl {
  std::unique_ptr<jinja::Template> tmpl;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->tmpl = jinja::parse_template(source, origin);
  return ChatTemplate(std::move(impl));
}

const std::string& ChatTemplate::origin() const {
  return impl_->tmpl->origin;
}

std::string ChatTemplate::render(const OJson& context, const ChatTemplateLimits& limits) const {
  FURLONG_CHECK(context.is_object(), impl_->tmpl->origin,
                ": the render context must be a JSON object, got ", context.type_name());
  jinja::Value ctx;
  try {
    ctx = jinja::from_json(context);
  } catch (const jinja::TemplateError& e) {
    FURLONG_FAIL(impl_->tmpl->origin, ": bad render context: ", e.what());
  }
  return jinja::render_template(*impl_->tmpl, ctx.as_dict(), limits);
}

namespace {

OJson read_config(const fs::path& dir) {
  fs::path path = dir / "tokenizer_config.json";
  if (!fs::exists(path)) return OJson::object();
  OJson j = parse_json_bounded<OJson>(read_file(path), path.string());
  FURLONG_CHECK(j.is_object(), path.string(), ": expected a JSON object");
  return j;
}

std::string label(const fs::path& dir, const std::string& what) {
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();
  return name.empty() ? what : name + "/" + what;
}

// Templates by name. Files (chat_template.jinja, additional_chat_templates/*.jinja) take
// priority over tokenizer_config.json's "chat_template", as in transformers 5.
std::map<std::string, ChatTemplate> load_templates(const fs::path& dir, const OJson& config) {
  std::map<std::string, ChatTemplate> out;
  if (fs::exists(dir / "chat_template.jinja"))
    out.emplace("default", ChatTemplate::parse(read_file(dir / "chat_template.jinja"),
                                               label(dir, "chat_template.jinja")));
  fs::path extra = dir / "additional_chat_templates";
  if (fs::is_directory(extra)) {
    for (const auto& entry : fs::directory_iterator(extra)) {
      if (entry.path().extension() != ".jinja") continue;
      std::string name = entry.path().stem().string();
      out.emplace(name,
                  ChatTemplate::parse(read_file(entry.path()),
                                      label(dir, "additional_chat_templates/" + name + ".jinja")));
    }
  }
  if (!out.empty()) return out;
  auto it = config.find("chat_template");
  std::string where = label(dir, "tokenizer_config.json:chat_template");
  FURLONG_CHECK(it != config.end() && !it->is_null(), label(dir, "tokenizer_config.json"),
                ": no chat template (no \"chat_template\" field and no chat_template.jinja)");
  if (it->is_string()) {
    out.emplace("default", ChatTemplate::parse(it->get<std::string>(), where));
    return out;
  }
  FURLONG_CHECK(it->is_array(), where, ": expected a string or a list of {name, template}");
  for (const auto& entry : *it) {
    FURLONG_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                      entry.contains("template") && entry["template"].is_string(),
                  where, ": each entry must be {\"name\": string, \"template\": string}");
    std::string name = entry["name"].get<std::string>();
    out.emplace(
        name, ChatTemplate::parse(entry["template"].get<std::string>(), where + "[" + name + "]"));
  }
  return out;
}

// A special token's text: a string, or an AddedToken object {"content": ...}.
std::optional<std::string> token_text(const OJson& v, bool require_added_token_type) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    if (require_added_token_type && v.value("__type", "") != "AddedToken") return std::nullopt;
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

// The special_tokens_map transformers merges into the template variables: the standard named
// tokens, other "*_token" entries and extra_special_tokens given as a dict (model-specific).
OJson load_special_tokens(const fs::path& dir, OJson config) {
  fs::path legacy = dir / "special_tokens_map.json";
  if (!config.contains("added_tokens_decoder") && fs::exists(legacy)) {
    OJson map;  // optional: a file that does not parse is ignored
    try {
      map = parse_json_bounded<OJson>(read_file(legacy), legacy.string());
    } catch (const Error&) {
    }
    if (map.is_object())
      for (const auto& [k, v] : map.items())
        if (k != "extra_special_tokens" && k != "additional_special_tokens") config[k] = v;
  }
  static const char* kStandard[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                    "pad_token", "cls_token", "mask_token"};
  OJson out = OJson::object();
  for (const auto& [k, v] : config.items()) {
    bool standard = std::any_of(std::begin(kStandard), std::end(kStandard),
                                [&](const char* s) { return k == s; });
    bool model_specific = !standard && k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0;
    if (!standard && !model_specific) continue;
    if (auto text = token_text(v, model_specific && v.is_object())) out[k] = *text;
  }
  auto extra = config.find("extra_special_tokens");
  if (extra != config.end() && extra->is_object())
    for (const auto& [k, v] : extra->items())
      if (auto text = token_text(v, false)) out[k] = *text;
  return out;
}

// transformers drops keys whose value is None and aliases reasoning fields
// ({"thinking": r, **message, "reasoning_content": r}).
OJson normalize_message(const OJson& message, size_t index) {
  FURLONG_CHECK(message.is_object(), "apply_chat_template: message ", index,
                " must be a JSON object, got ", message.type_name());
  OJson clean = OJson::object();
  for (const auto& [k, v] : message.items())
    if (!v.is_null()) clean[k] = v;
  const OJson* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    if (clean.contains(key)) {
      reasoning = &clean[key];
      break;
    }
  }
  if (reasoning == nullptr) return clean;
  OJson out = OJson::object();
  out["thinking"] = *reasoning;
  for (const auto& [k, v] : clean.items()) out[k] = v;
  out["reasoning_content"] = *reasoning;
  return out;
}

void check_list_of_objects(const OJson& v, const char* what) {
  if (v.is_null()) return;
  FURLONG_CHECK(v.is_array(), "apply_chat_template: '", what, "' must be a list, got ",
                v.type_name());
  for (const auto& item : v)
    FURLONG_CHECK(item.is_object(), "apply_chat_template: each entry of '", what,
                  "' must be a JSON object, got ", item.type_name());
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_dir(const fs::path& dir) {
  auto templates = load_templates(dir, read_config(dir));
  auto it = templates.find("default");
  FURLONG_CHECK(it != templates.end(), dir.string(),
                ": several chat templates and none is named \"default\"");
  return std::move(it->second);
}

ChatFormatter::ChatFormatter(const fs::path& tokenizer_dir) {
  OJson config = read_config(tokenizer_dir);
  templates_ = load_templates(tokenizer_dir, config);
  special_tokens_ = load_special_tokens(tokenizer_dir, std::move(config));
}

ChatFormatter::ChatFormatter(const fs::path& tokenizer_dir, const fs::path& template_path) {
  FURLONG_CHECK(fs::is_regular_file(template_path), template_path.string(),
                ": no such chat template file");
  templates_.emplace("default",
                     ChatTemplate::parse(read_file(template_path), template_path.string()));
  special_tokens_ = load_special_tokens(tokenizer_dir, read_config(tokenizer_dir));
}

std::string ChatFormatter::apply(const OJson& messages, bool add_generation_prompt,
                                 const OJson& extra_context,
                                 const ChatTemplateLimits& limits) const {
  FURLONG_CHECK(messages.is_array(), "apply_chat_template: messages must be a list, got ",
                messages.type_name());
  FURLONG_CHECK(!messages.empty(),
                "apply_chat_template: cannot apply a chat template to an empty conversation");
  FURLONG_CHECK(extra_context.is_object(), "apply_chat_template: extra context must be an object");
  for (const char* reserved : {"messages", "add_generation_prompt"})
    FURLONG_CHECK(!extra_context.contains(reserved), "apply_chat_template: '", reserved,
                  "' cannot be passed as an extra template variable");
  OJson tools = extra_context.value("tools", OJson());
  OJson documents = extra_context.value("documents", OJson());
  check_list_of_objects(tools, "tools");
  check_list_of_objects(documents, "documents");

  const ChatTemplate* chosen = nullptr;
  if (!tools.is_null() && templates_.count("tool_use"))
    chosen = &templates_.at("tool_use");
  else if (templates_.count("default"))
    chosen = &templates_.at("default");
  FURLONG_CHECK(chosen != nullptr,
                "apply_chat_template: this tokenizer has several chat "
                "templates and none is named \"default\"");

  OJson context = special_tokens_;
  for (const auto& [k, v] : extra_context.items())
    if (k != "tools" && k != "documents") context[k] = v;
  OJson normalized = OJson::array();
  for (size_t i = 0; i < messages.size(); ++i)
    normalized.push_back(normalize_message(messages[i], i));
  context["messages"] = std::move(normalized);
  context["tools"] = tools;
  context["documents"] = documents;
  context["add_generation_prompt"] = add_generation_prompt;
  return chosen->render(context, limits);
}

std::string apply_chat_template(const fs::path& tokenizer_dir, const OJson& messages,
                                bool add_generation_prompt, const OJson& extra_context) {
  return ChatFormatter(tokenizer_dir).apply(messages, add_generation_prompt, extra_context);
}

}  // namespace furlong::tokenizer
