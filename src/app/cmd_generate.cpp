// furlong generate: batched generation of JSONL prompts through the rollout engine.
//
// Input rows: {"input_ids": [...]}, {"messages": [...]} (rendered with the chat template and
// the generation prompt) or {"text": ...}. Output: --n-samples rows per prompt, prompt-major in
// input order, each {"index": prompt row (0-based), "sample_index", "output_ids", "text",
// "logprobs" (log softmax(logits / T) of each output id, T = 1 when greedy), "finish_reason"
// ("stop" | "length" | "abort"), "prompt_tokens"}.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>

#include "app/common.h"
#include "core/concurrency.h"
#include "core/jsonl.h"
#include "core/log.h"
#include "core/progress.h"
#include "engine/engine.h"
#include "models/causal_lm.h"
#include "tokenizer/jinja/chat_template.h"

namespace furlong::app {
namespace {

std::vector<int64_t> prompt_ids(const JsonlRow& row, const engine::Engine& eng,
                                const tokenizer::ChatFormatter* chat, bool add_special) {
  const auto& v = row.value;
  const int64_t vocab = eng.model().config().vocab_size;
  std::vector<int64_t> ids;
  if (v.contains("input_ids")) {
    ids = json_get<std::vector<int64_t>>(v, "input_ids", row.where);
    for (size_t i = 0; i < ids.size(); ++i) {
      FURLONG_CHECK(ids[i] >= 0 && ids[i] < vocab, row.where, ": input_ids[", i, "] = ", ids[i],
                    " is outside the vocabulary [0, ", vocab, ")");
    }
  } else if (v.contains("messages")) {
    FURLONG_CHECK(v["messages"].is_array(), row.where, ": field 'messages' must be a list");
    FURLONG_CHECK(chat, row.where,
                  ": a {\"messages\"} row needs a chat template in the model "
                  "directory");
    OrderedJson extra = OrderedJson::object();
    if (v.contains("tools")) extra["tools"] = v["tools"];
    std::string text;
    try {
      text = chat->apply(v["messages"], /*add_generation_prompt=*/true, extra);
    } catch (const Error& e) {
      FURLONG_FAIL(row.where, ": ", e.what());
    }
    ids = eng.tokenizer().encode(text, /*add_special_tokens=*/false);
  } else {
    FURLONG_CHECK(v.contains("text"), row.where,
                  ": expected a field \"input_ids\", \"messages\" or \"text\"");
    ids = eng.tokenizer().encode(json_get<std::string>(v, "text", row.where), add_special);
  }
  FURLONG_CHECK(!ids.empty(), row.where, ": the prompt has no tokens");
  for (size_t i = 0; i < ids.size(); ++i) {
    FURLONG_CHECK(ids[i] < vocab, row.where, ": token ", ids[i], " at position ", i,
                  " is outside the model's vocabulary [0, ", vocab, ")");
  }
  FURLONG_CHECK(static_cast<int64_t>(ids.size()) < eng.context_length(), row.where,
                ": the prompt has ", ids.size(), " tokens; the context length is ",
                eng.context_length());
  return ids;
}

// A per-sample seed from (base, prompt index, sample index) (splitmix64 steps).
uint64_t sample_seed(int64_t base, size_t prompt, int64_t sample) {
  uint64_t x = static_cast<uint64_t>(base);
  for (uint64_t v : {static_cast<uint64_t>(prompt), static_cast<uint64_t>(sample)}) {
    x += 0x9E3779B97F4A7C15ull + v;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
  }
  return x >> 1;  // fits in int64 (SGLang seeds are non-negative integers)
}

std::string output_text(const engine::Engine& eng, const engine::GenerateOutput& out,
                        const engine::SamplingParams& p) {
  std::string text = eng.tokenizer().decode(out.output_ids, p.skip_special_tokens);
  if (!out.matched_stop_string.empty() && !p.no_stop_trim) {
    auto pos = text.find(out.matched_stop_string);
    if (pos != std::string::npos) text.resize(pos);
  }
  return text;
}

void validate(const GenerateOptions& o) {
  FURLONG_CHECK(o.temperature >= 0 && std::isfinite(o.temperature),
                "--temperature must be a finite number >= 0, got ", o.temperature);
  FURLONG_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p must be in (0, 1], got ", o.top_p);
  FURLONG_CHECK(o.min_p >= 0 && o.min_p < 1, "--min-p must be in [0, 1), got ", o.min_p);
  FURLONG_CHECK(o.max_new_tokens >= 0, "--max-new-tokens must be >= 0, got ", o.max_new_tokens);
  FURLONG_CHECK(o.n_samples >= 1, "--n-samples must be >= 1, got ", o.n_samples);
  FURLONG_CHECK(o.seed >= 0, "--seed must be >= 0, got ", o.seed);
}

// Runs every request and waits, with a progress bar over output tokens (tokens/s and an ETA;
// the total is the sum of max_new_tokens, so the ETA is an upper bound when samples stop
// early) and finished samples as its postfix. Callbacks run on the engine's scheduler thread,
// the only one that touches the bar until all are done.
std::vector<engine::GenerateOutput> generate_with_progress(
    engine::Engine& eng, const std::vector<engine::GenerateRequest>& requests) {
  int64_t budget = 0;
  for (const auto& r : requests) budget += r.sampling.max_new_tokens;
  ProgressBar progress("generate", budget, "tok");
  Gather<engine::GenerateOutput> results(requests.size());
  FirstError error;
  size_t done = 0;  // callbacks run one at a time, on the engine's scheduler thread
  std::vector<engine::Engine::Submission> batch;
  batch.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    auto on_done = [&, i](engine::RequestId, engine::GenerateOutput out) {
      if (!out.error.empty()) error.record(out.error);
      progress.set_postfix(std::to_string(++done) + "/" + std::to_string(requests.size()) +
                           " samples");
      results.put(i, std::move(out));  // last: take_all may return after it
    };
    auto on_tokens = [&](engine::RequestId, const std::vector<int64_t>& ids,
                         const std::vector<float>&) {
      progress.advance(static_cast<int64_t>(ids.size()));
    };
    batch.push_back({requests[i], std::move(on_done), std::move(on_tokens)});
  }
  // All at once (none queued if one is rejected): the engine's batches, and so the outputs,
  // are then the same in every run with the same input and seed.
  eng.submit_all(std::move(batch));
  auto outputs = results.take_all();
  progress.finish();
  FURLONG_CHECK(error.empty(), "generate: an engine step failed: ", error.message());
  return outputs;
}

}  // namespace

int run_generate(const std::vector<std::string>& args) {
  GenerateOptions o;
  config::FlagSet flags("furlong generate",
                        "Batched generation of JSONL prompts with the rollout engine, with the "
                        "log-prob of every generated token.");
  register_flags(flags, o);
  if (!flags.parse(args)) return 0;
  validate(o);
  auto rows = read_jsonl(o.input);
  auto eng = engine::Engine::load(o.hf_checkpoint, o.engine);
  std::unique_ptr<tokenizer::ChatFormatter> chat;
  bool needs_chat = false;
  for (const auto& row : rows)
    needs_chat = needs_chat || (!row.value.contains("input_ids") && row.value.contains("messages"));
  if (needs_chat) chat = std::make_unique<tokenizer::ChatFormatter>(o.hf_checkpoint);

  engine::SamplingParams base;
  base.temperature = o.temperature;
  base.top_p = o.top_p;
  base.top_k = o.top_k;
  base.min_p = o.min_p;
  base.max_new_tokens = o.max_new_tokens;
  base.ignore_eos = o.ignore_eos;
  base.stop_token_ids = o.stop_token_ids;
  base.stop = o.stop;
  std::vector<engine::GenerateRequest> requests;
  for (size_t i = 0; i < rows.size(); ++i) {
    auto ids = prompt_ids(rows[i], *eng, chat.get(), o.add_special_tokens);
    // Compared without the sum, which overflows for --max-new-tokens near 2^63.
    const auto prompt_tokens = static_cast<int64_t>(ids.size());
    FURLONG_CHECK(prompt_tokens <= eng->context_length() &&
                      o.max_new_tokens <= eng->context_length() - prompt_tokens,
                  rows[i].where, ": prompt (", ids.size(), " tokens) + --max-new-tokens ",
                  o.max_new_tokens, " exceeds the context length ", eng->context_length());
    for (int64_t j = 0; j < o.n_samples; ++j) {
      engine::GenerateRequest r{ids, base};
      r.sampling.seed = sample_seed(o.seed, i, j);
      requests.push_back(std::move(r));
    }
  }
  LOG_INFO("generating ", requests.size(), " samples for ", rows.size(), " prompts");
  auto start = std::chrono::steady_clock::now();
  auto outputs = generate_with_progress(*eng, requests);
  JsonlWriter writer(o.output);
  int64_t generated = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const auto& out = outputs[k];
    generated += static_cast<int64_t>(out.output_ids.size());
    std::string line = "{\"index\":" + std::to_string(k / o.n_samples) +
                       ",\"sample_index\":" + std::to_string(k % o.n_samples) +
                       ",\"output_ids\":" + Json(out.output_ids).dump() + ",\"text\":" +
                       Json(output_text(*eng, out, requests[k].sampling))
                           .dump(-1, ' ', false, Json::error_handler_t::replace) +
                       ",\"logprobs\":" +
                       floats_to_json_array(out.output_logprobs.data(),
                                            static_cast<int64_t>(out.output_logprobs.size())) +
                       ",\"finish_reason\":\"" + engine::finish_reason_name(out.finish_reason) +
                       "\",\"prompt_tokens\":" + std::to_string(out.prompt_tokens) + "}";
    writer.write_line(line);
  }
  writer.commit();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG_INFO("wrote ", o.output, " (", outputs.size(), " rows, ", generated, " tokens, ",
           static_cast<int64_t>(generated / std::max(seconds, 1e-9)), " tokens/s)");
  return 0;
}

}  // namespace furlong::app
