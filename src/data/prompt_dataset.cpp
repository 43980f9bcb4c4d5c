#include "data/prompt_dataset.h"

#include <algorithm>
#include <charconv>

#include "core/jsonl.h"
#include "core/log.h"
#include "data/py_random.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::data {
namespace {

std::optional<int64_t> parse_slice_bound(std::string_view text, const std::string& path) {
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  FURLONG_CHECK(ec == std::errc() && ptr == text.data() + text.size(), "--prompt-data '", path,
                "': slice bound '", text, "' is not an integer (expected path@[start:end])");
  return value;
}

// Python's slice clamping of one bound.
int64_t clamp_bound(std::optional<int64_t> bound, int64_t n, int64_t fallback) {
  if (!bound) return fallback;
  int64_t b = *bound < 0 ? *bound + n : *bound;
  return std::clamp<int64_t>(b, 0, n);
}

void check_messages(const OrderedJson& messages, const std::string& where, const std::string& key) {
  FURLONG_CHECK(!messages.empty(), where, ": field '", key, "' is an empty message list");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    FURLONG_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(), where, ": field '",
                  key, "'[", i, "] must be a message object with a string 'role', got ",
                  json_excerpt(m));
  }
}

OrderedJson read_tools(const OrderedJson& row, const std::string& key, const std::string& where) {
  auto it = row.find(key);
  if (it == row.end() || it->is_null()) return nullptr;
  OrderedJson tools = *it;
  if (tools.is_string())
    tools = parse_ordered_json(tools.get<std::string>(), where + " '" + key + "'");
  FURLONG_CHECK(tools.is_array(), where, ": field '", key,
                "' must be a list of tools (or a JSON string holding one), got ",
                json_type_name(tools));
  return tools;
}

struct RowContext {
  const PromptDataOptions& options;
  const tokenizer::Tokenizer& tokenizer;
  const tokenizer::ChatFormatter* chat;
};

// Builds the Prompt of one row. *filterable: whether --rollout-max-prompt-len applies to it
// (string prompts, templated or not; a message list only under --apply-chat-template).
Prompt build_prompt(const JsonlRow& row, const RowContext& ctx, bool* filterable) {
  const auto& o = ctx.options;
  Prompt p;
  p.where = row.where;
  auto input = row.value.find(o.input_key);
  FURLONG_CHECK(input != row.value.end(), row.where, ": the prompt field '", o.input_key,
                "' (--input-key) is missing");
  FURLONG_CHECK(input->is_string() || input->is_array(), row.where, ": field '", o.input_key,
                "' must be a string or a list of messages, got ", json_type_name(*input));
  p.prompt = *input;
  if (!o.label_key.empty()) {
    auto label = row.value.find(o.label_key);
    FURLONG_CHECK(label != row.value.end(), row.where, ": the label field '", o.label_key,
                  "' (--label-key) is missing");
    p.label = label->is_string() ? label->get<std::string>() : label->dump();
  }
  auto meta = row.value.find(o.metadata_key);
  if (meta != row.value.end() && !meta->is_null()) {
    FURLONG_CHECK(meta->is_object(), row.where, ": field '", o.metadata_key,
                  "' (--metadata-key) must be an object, got ", json_type_name(*meta));
    p.metadata = Json::parse(meta->dump());
  }
  OrderedJson tools = read_tools(row.value, o.tool_key, row.where);
  if (!tools.is_null()) p.metadata["tools"] = Json::parse(tools.dump());

  const bool templated = o.apply_chat_template || input->is_array();
  *filterable = input->is_string() || o.apply_chat_template;
  if (!templated) {
    p.text = input->get<std::string>();
  } else {
    FURLONG_CHECK(ctx.chat != nullptr, row.where,
                  ": this prompt needs the tokenizer's chat template, which was not loaded");
    OrderedJson messages =
        input->is_string() ? OrderedJson::array({{{"role", "user"}, {"content", *input}}}) : *input;
    check_messages(messages, row.where, o.input_key);
    OrderedJson extra = o.apply_chat_template_kwargs;
    if (!tools.is_null()) extra["tools"] = tools;
    try {
      p.text = ctx.chat->apply(messages, /*add_generation_prompt=*/true, extra);
    } catch (const Error& e) {
      FURLONG_FAIL(row.where, ": chat template: ", e.what());
    }
  }
  try {
    p.ids = ctx.tokenizer.encode(p.text, /*add_special_tokens=*/false);
  } catch (const Error& e) {
    FURLONG_FAIL(row.where, ": ", e.what());
  }
  return p;
}

}  // namespace

PathSlice parse_path_slice(const std::string& path) {
  PathSlice slice{path, std::nullopt, std::nullopt};
  size_t at = path.rfind("@[");
  if (at == std::string::npos || path.back() != ']') return slice;
  std::string_view inner(path.data() + at + 2, path.size() - at - 3);
  size_t colon = inner.find(':');
  FURLONG_CHECK(colon != std::string_view::npos, "--prompt-data '", path,
                "': a row slice must look like path@[start:end]");
  slice.file = path.substr(0, at);
  slice.start = parse_slice_bound(inner.substr(0, colon), path);
  slice.end = parse_slice_bound(inner.substr(colon + 1), path);
  return slice;
}

std::pair<int64_t, int64_t> PathSlice::range(int64_t num_rows) const {
  return {clamp_bound(start, num_rows, 0), clamp_bound(end, num_rows, num_rows)};
}

PromptDataset::PromptDataset(const PromptDataOptions& options,
                             const tokenizer::Tokenizer& tokenizer,
                             const tokenizer::ChatFormatter* chat)
    : shuffle_(options.shuffle), seed_(options.seed) {
  FURLONG_CHECK(!options.path.empty(), "--prompt-data is required");
  FURLONG_CHECK(!options.input_key.empty(), "--input-key must not be empty");
  FURLONG_CHECK(!options.max_prompt_len || *options.max_prompt_len >= 1,
                "--rollout-max-prompt-len must be >= 1, got ", options.max_prompt_len.value_or(0));
  FURLONG_CHECK(options.apply_chat_template_kwargs.is_object(),
                "--apply-chat-template-kwargs must be a JSON object");
  PathSlice slice = parse_path_slice(options.path);
  FURLONG_CHECK(!slice.file.ends_with(".parquet"), "--prompt-data ", slice.file,
                ": parquet prompt files are not supported; convert them to JSONL (one JSON "
                "object per line)");
  std::vector<JsonlRow> rows = read_jsonl(slice.file);
  FURLONG_CHECK(!rows.empty(), slice.file, ": the prompt file contains no rows");
  const auto n = static_cast<int64_t>(rows.size());
  const auto [begin, end] = slice.range(n);
  FURLONG_CHECK(begin < end, "--prompt-data '", options.path, "' selects no rows out of ", n);
  RowContext ctx{options, tokenizer, chat};
  for (int64_t r = begin; r < end; ++r) {
    bool filterable = false;
    Prompt p = build_prompt(rows[r], ctx, &filterable);
    if (filterable && options.max_prompt_len &&
        static_cast<int64_t>(p.ids.size()) > *options.max_prompt_len) {
      ++dropped_too_long_;
      continue;
    }
    prompts_.push_back(std::move(p));
  }
  if (dropped_too_long_ > 0) {
    LOG_INFO(slice.file, ": dropped ", dropped_too_long_, " of ", end - begin,
             " prompts longer than --rollout-max-prompt-len ", *options.max_prompt_len, " tokens");
  }
  FURLONG_CHECK(!prompts_.empty(), slice.file, ": no prompt is left after dropping the ",
                dropped_too_long_, " longer than --rollout-max-prompt-len");
  set_epoch(0);
}

PromptDataset::PromptDataset(std::vector<Prompt> prompts, bool shuffle, uint64_t seed)
    : prompts_(std::move(prompts)), shuffle_(shuffle), seed_(seed) {
  FURLONG_CHECK(!prompts_.empty(), "a prompt dataset needs at least one prompt");
  set_epoch(0);
}

const Prompt& PromptDataset::at(int64_t row) const {
  FURLONG_ASSERT(row >= 0 && row < size(), "row ", row, " out of range");
  return prompts_[static_cast<size_t>(row)];
}

void PromptDataset::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  if (shuffle_) {
    order_ = epoch_permutation(size(), seed_, epoch);
  } else {
    order_.resize(prompts_.size());
    for (int64_t i = 0; i < size(); ++i) order_[static_cast<size_t>(i)] = i;
  }
}

std::vector<const Prompt*> PromptDataset::next_batch(int64_t count) {
  FURLONG_CHECK(count >= 1, "a prompt batch needs at least one prompt, got ", count);
  std::vector<const Prompt*> batch;
  batch.reserve(static_cast<size_t>(count));
  while (static_cast<int64_t>(batch.size()) < count) {
    if (offset_ == size()) {
      set_epoch(epoch_ + 1);
      offset_ = 0;
    }
    batch.push_back(&prompts_[static_cast<size_t>(order_[static_cast<size_t>(offset_)])]);
    ++offset_;
  }
  return batch;
}

Json PromptDataset::state() const {
  return Json{{"epoch", epoch_}, {"offset", offset_}, {"num_prompts", size()}};
}

void PromptDataset::load_state(const Json& state) {
  const std::string where = "prompt dataset state";
  auto epoch = json_get<int64_t>(state, "epoch", where);
  auto offset = json_get<int64_t>(state, "offset", where);
  auto num = json_get<int64_t>(state, "num_prompts", where);
  FURLONG_CHECK(num == size(), where, ": saved for a dataset of ", num,
                " prompts, but this dataset has ", size());
  FURLONG_CHECK(epoch >= 0, where, ": epoch must be >= 0, got ", epoch);
  FURLONG_CHECK(offset >= 0 && offset <= size(), where, ": offset ", offset, " is outside [0, ",
                size(), "]");
  set_epoch(epoch);
  offset_ = offset;
}

}  // namespace furlong::data
