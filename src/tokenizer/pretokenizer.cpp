#include "tokenizer/pretokenizer.h"

#include <vector>

#include "core/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace furlong::tokenizer {
namespace {

// HF's ByteLevel regex (GPT-2's pattern; note the contractions are case-sensitive here).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  FURLONG_FAIL(where, ": unsupported Split behavior '", name,
               "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

struct Span {
  size_t start, end;
  bool is_match;
};

// Splits `text` at the matches of `regex`, keeping each match and each gap as its own piece.
void split_isolated(const Regex& regex, std::string_view text, PieceSink sink) {
  size_t pos = 0, start = 0, end = 0;
  while (pos < text.size() && regex.find(text, pos, start, end)) {
    if (start > pos) sink(text.substr(pos, start - pos));
    sink(text.substr(start, end - start));
    pos = end;
  }
  if (pos < text.size()) sink(text.substr(pos));
}

// Matches and gaps covering `text`, in order; `invert` swaps which is which.
std::vector<Span> spans_of(const Regex& regex, std::string_view text, bool invert) {
  std::vector<Span> spans;
  size_t pos = 0, start = 0, end = 0;
  while (pos < text.size() && regex.find(text, pos, start, end)) {
    if (start > pos) spans.push_back({pos, start, invert});
    spans.push_back({start, end, !invert});
    pos = end;
  }
  if (pos < text.size()) spans.push_back({pos, text.size(), invert});
  return spans;
}

// Applies a non-isolating behavior to spans, giving the pieces' [start, end) ranges.
std::vector<Span> merge_spans(const std::vector<Span>& spans, Behavior behavior) {
  std::vector<Span> out;
  bool previous_match = false;
  if (behavior == Behavior::kMergedWithNext) {
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      if (it->is_match && !previous_match && !out.empty()) {
        out.back().start = it->start;
      } else {
        out.push_back(*it);
      }
      previous_match = it->is_match;
    }
    return {out.rbegin(), out.rend()};
  }
  for (const Span& span : spans) {
    if (behavior == Behavior::kRemoved) {
      if (!span.is_match) out.push_back(span);
      continue;
    }
    const bool merge = behavior == Behavior::kMergedWithPrevious
                           ? span.is_match && !previous_match
                           : span.is_match == previous_match;  // kContiguous
    if (merge && !out.empty()) {
      out.back().end = span.end;
    } else {
      out.push_back(span);
    }
    previous_match = span.is_match;
  }
  return out;
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  void split(std::string_view text, PieceSink sink) const override {
    if (behavior_ == Behavior::kIsolated) {  // inverting changes nothing when all are isolated
      split_isolated(regex_, text, sink);
      return;
    }
    for (const Span& span : merge_spans(spans_of(regex_, text, invert_), behavior_)) {
      if (span.end > span.start) sink(text.substr(span.start, span.end - span.start));
    }
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// Maps each byte of a piece to its byte-level character, after optionally prefixing a space
// and splitting with the GPT-2 regex.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  void split(std::string_view text, PieceSink sink) const override {
    std::string buffer;
    auto map_piece = [&](std::string_view piece) {
      const auto& table = unicode::byte_to_unicode();
      buffer.clear();
      for (char c : piece) buffer += table[static_cast<unsigned char>(c)];
      sink(buffer);
    };
    std::string prefixed;
    if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed += ' ';
      prefixed += text;
      text = prefixed;
    }
    if (regex_) {
      split_isolated(*regex_, text, map_piece);
    } else if (!text.empty()) {
      map_piece(text);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}

  void split(std::string_view text, PieceSink sink) const override { run(0, text, sink); }

 private:
  // Feeds `text` to step `index`, whose pieces go on to the next step (the last to `sink`).
  void run(size_t index, std::string_view text, PieceSink sink) const {
    if (index == steps_.size()) {
      sink(text);
      return;
    }
    steps_[index]->split(text, [&](std::string_view piece) { run(index + 1, piece, sink); });
  }

  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

Regex split_regex(const Json& spec, const std::string& where) {
  const Json& pattern = spec.contains("pattern") ? spec["pattern"] : Json();
  FURLONG_CHECK(pattern.is_object() && pattern.size() == 1 &&
                    (pattern.contains("Regex") || pattern.contains("String")),
                where, ": field 'pattern' must be {\"Regex\": ...} or {\"String\": ...}, got ",
                json_excerpt(pattern));
  if (pattern.contains("Regex")) {
    return Regex(json_get<std::string>(pattern, "Regex", where + ".pattern"), where + ".pattern");
  }
  return Regex::literal(json_get<std::string>(pattern, "String", where + ".pattern"),
                        where + ".pattern");
}

std::unique_ptr<PreTokenizer> make_split(const Json& spec, const std::string& where) {
  Regex regex = split_regex(spec, where);
  Behavior behavior = parse_behavior(json_get<std::string>(spec, "behavior", where), where);
  bool invert = json_get_or<bool>(spec, "invert", false, where);
  return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
}

std::unique_ptr<PreTokenizer> make_byte_level(const Json& spec, const std::string& where) {
  bool add_prefix_space = json_get_or<bool>(spec, "add_prefix_space", true, where);
  bool use_regex = json_get_or<bool>(spec, "use_regex", true, where);
  std::unique_ptr<Regex> regex;
  if (use_regex) regex = std::make_unique<Regex>(kGpt2Pattern, where);
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
}

std::unique_ptr<PreTokenizer> make_sequence(const Json& spec, const std::string& where) {
  auto it = spec.find("pretokenizers");
  FURLONG_CHECK(it != spec.end() && it->is_array(), where,
                ": field 'pretokenizers' must be an array");
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (size_t i = 0; i < it->size(); ++i) {
    auto step = make_pre_tokenizer((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]");
    if (step) steps.push_back(std::move(step));
  }
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const auto type = json_get<std::string>(spec, "type", where);
  if (type == "Sequence") return make_sequence(spec, where);
  if (type == "Split") return make_split(spec, where);
  if (type == "ByteLevel") return make_byte_level(spec, where);
  FURLONG_FAIL(where, ": unsupported pre-tokenizer type '", type,
               "' (supported: Sequence, Split, ByteLevel)");
}

}  // namespace furlong::tokenizer
