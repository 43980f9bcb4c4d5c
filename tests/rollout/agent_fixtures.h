// Fixtures of the agent tests (agent_episode_test.cpp, harness_test.cpp): the real Qwen3
// tokenizer and chat template, a calculator tool, turns scripted as text, and engines that
// answer each request with a turn its callback picks.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "rollout/rollout_engines.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::rollout::agent_fixtures {

inline const tokenizer::Tokenizer& qwen() {
  static const auto tok = tokenizer::Tokenizer::from_directory(testing::tokenizer_dir("qwen3"));
  return tok;
}
inline const tokenizer::ChatFormatter& qwen_chat() {
  static const tokenizer::ChatFormatter chat(testing::tokenizer_dir("qwen3"));
  return chat;
}
inline int64_t im_end() {
  return *qwen().token_to_id("<|im_end|>");
}

inline const OrderedJson& tools() {
  static const OrderedJson t = OrderedJson::parse(R"([{"type": "function", "function": {
      "name": "calculator", "description": "Evaluates an arithmetic expression",
      "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                     "required": ["expression"]}}}])");
  return t;
}

inline std::string call_text(const std::string& expression) {
  return "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"" + expression +
         "\"}}\n</tool_call>";
}

// A scripted turn: `text`'s tokens + <|im_end|> (cut to `max_new_tokens`, then finished by
// length), with log-probs -(1 + turn) / 100 - position / 1000, so misplaced ones show.
inline engine::GenerateOutput scripted_turn(const std::string& text, int turn,
                                            int64_t max_new_tokens) {
  engine::GenerateOutput out;
  out.output_ids = qwen().encode(text);
  out.output_ids.push_back(im_end());
  out.finish_reason = engine::FinishReason::kStop;
  if (static_cast<int64_t>(out.output_ids.size()) > max_new_tokens) {
    out.output_ids.resize(static_cast<size_t>(max_new_tokens));
    out.finish_reason = engine::FinishReason::kLength;
  }
  for (size_t p = 0; p < out.output_ids.size(); ++p)
    out.output_logprobs.push_back(-(1.0f + static_cast<float>(turn)) / 100.0f -
                                  static_cast<float>(p) / 1000.0f);
  return out;
}

// Engines that answer each request, on a thread of their own (as real engines call back from
// theirs), with scripted_turn(text(input, nth), nth): `nth` counts the requests so far.
class TextEngines : public RolloutEngines {
 public:
  using TurnText = std::function<std::string(const std::vector<int64_t>& input, int nth)>;
  explicit TextEngines(TurnText text) : text_(std::move(text)) {}
  ~TextEngines() override {
    for (auto& t : threads_) t.join();
  }
  void submit(engine::GenerateRequest request, Done done) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int nth = static_cast<int>(inputs.size());
    texts.push_back(text_(request.input_ids, nth));
    inputs.push_back(request.input_ids);
    auto out = scripted_turn(texts.back(), nth, request.sampling.max_new_tokens);
    threads_.emplace_back(
        [done = std::move(done), out = std::move(out)]() mutable { done(std::move(out)); });
  }
  void abort_all() override {}
  int64_t sync_weights(const WeightSource&, int64_t, bool) override { return 0; }
  std::string describe() const override { return "text-scripted"; }

  std::vector<std::vector<int64_t>> inputs;  // in submission order
  std::vector<std::string> texts;

 private:
  TurnText text_;
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

}  // namespace furlong::rollout::agent_fixtures
