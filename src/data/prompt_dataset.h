// The prompt dataset of an RL run (miles' Dataset + RolloutDataSource).
//
// Rows come from a JSONL file (`--prompt-data`, optionally sliced as "path@[start:end]" with
// Python slice semantics). Per row: the prompt is row[input_key] (a string or an OpenAI-style
// message list), the label row[label_key] (when a label key is given), the metadata
// row[metadata_key] (an object, {} when absent), tools row[tool_key] (a list or a JSON string
// holding one; copied into metadata["tools"]). A message list, or any prompt under
// --apply-chat-template (a string becomes one user message), is rendered once at load by the
// tokenizer's chat template with the generation prompt; the text is tokenized without special
// tokens (what generation sends). --rollout-max-prompt-len drops rows whose string prompt has
// more tokens than that.
//
// Order: file order, or with --rollout-shuffle epoch e visits the rows in
// epoch_permutation(n, rollout_seed, e) (CPython's random.shuffle seeded with seed + e, as
// miles does). next_batch(k) continues where the previous call stopped, wrapping into the next
// epoch (re-shuffled); state()/load_state() carry (epoch, offset) so a resumed run sees exactly
// the prompts an uninterrupted one would.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json_util.h"

namespace furlong::tokenizer {
class Tokenizer;
class ChatFormatter;
}  // namespace furlong::tokenizer

namespace furlong::data {

struct PromptDataOptions {
  std::string path;                       // --prompt-data ("file.jsonl" or "file.jsonl@[a:b]")
  std::string input_key = "input";        // --input-key
  std::string label_key;                  // --label-key (empty: rows carry no label)
  std::string metadata_key = "metadata";  // --metadata-key
  std::string tool_key = "tools";         // --tool-key (miles' tool_key)
  bool apply_chat_template = false;       // --apply-chat-template
  OrderedJson apply_chat_template_kwargs = OrderedJson::object();  // extra template variables
  std::optional<int64_t> max_prompt_len;  // --rollout-max-prompt-len (tokens)
  bool shuffle = false;                   // --rollout-shuffle
  uint64_t seed = 42;                     // --rollout-seed
};

struct Prompt {
  std::string where;                 // "<file>:<line>" of the row
  OrderedJson prompt;                // as the row gave it: a string or a message list
  std::string text;                  // what the engine is sent (templated when a template applied)
  std::vector<int64_t> ids;          // `text` tokenized without special tokens
  std::optional<std::string> label;  // strings as is, other JSON values serialized
  Json metadata = Json::object();
};

class PromptDataset {
 public:
  // `chat` may be null when no row needs a chat template (it is an error if one does).
  PromptDataset(const PromptDataOptions& options, const tokenizer::Tokenizer& tokenizer,
                const tokenizer::ChatFormatter* chat);
  // From prompts already built (tests, custom sources); must be non-empty.
  PromptDataset(std::vector<Prompt> prompts, bool shuffle, uint64_t seed);

  int64_t size() const { return static_cast<int64_t>(prompts_.size()); }
  const Prompt& at(int64_t row) const;
  // Rows dropped at load by --rollout-max-prompt-len.
  int64_t num_dropped_too_long() const { return dropped_too_long_; }

  // The next `count` prompts (count >= 1), wrapping into later epochs as often as needed.
  // Pointers stay valid for the dataset's lifetime.
  std::vector<const Prompt*> next_batch(int64_t count);

  int64_t epoch() const { return epoch_; }
  int64_t offset() const { return offset_; }
  // {"epoch", "offset", "num_prompts"}; load_state checks num_prompts against this dataset.
  Json state() const;
  void load_state(const Json& state);

 private:
  void set_epoch(int64_t epoch);
  std::vector<Prompt> prompts_;  // file order
  std::vector<int64_t> order_;   // this epoch's order (row indices)
  bool shuffle_ = false;
  uint64_t seed_ = 42;
  int64_t epoch_ = 0;
  int64_t offset_ = 0;  // position in order_ of the next prompt
  int64_t dropped_too_long_ = 0;
};

// Splits "file@[start:end]" into the file and the row range it selects out of `num_rows`
// (Python slice semantics: negative indices count from the end, bounds are clamped). The one
// parser of this syntax: RL prompt data and SFT data (train/sft_data.cpp) both use it.
struct PathSlice {
  std::string file;
  std::optional<int64_t> start, end;
  // [begin, end) of the selected rows out of `num_rows` (begin >= end: none selected).
  std::pair<int64_t, int64_t> range(int64_t num_rows) const;
};
PathSlice parse_path_slice(const std::string& path);

}  // namespace furlong::data
