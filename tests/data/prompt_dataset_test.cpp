// The prompt dataset: row parsing and its errors, chat templating, the length filter, row
// slices, the per-epoch shuffle (bit-identical to Python's random.shuffle, which miles uses) and
// resuming at exactly the same prompts.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_util.h"
#include "core/files.h"
#include "data/prompt_dataset.h"
#include "data/py_random.h"
#include "data/sample_builder.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::data {
namespace {

using furlong::testing::error_of;

const tokenizer::Tokenizer& qwen() {
  static const auto tok = tokenizer::Tokenizer::from_directory(testing::tokenizer_dir("qwen3"));
  return tok;
}
const tokenizer::ChatFormatter& qwen_chat() {
  static const tokenizer::ChatFormatter chat(testing::tokenizer_dir("qwen3"));
  return chat;
}

std::string write_lines(const std::vector<std::string>& lines) {
  auto path = testing::scratch_dir() / "prompts.jsonl";
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
  return path.string();
}

std::string numbered_file(int n) {
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i)
    lines.push_back(R"({"input": "question )" + std::to_string(i) + "\"}");
  return write_lines(lines);
}

PromptDataset load(const PromptDataOptions& o) {
  return PromptDataset(o, qwen(), &qwen_chat());
}

// The row numbers (from "question <k>") of a batch.
std::vector<int> rows_of(const std::vector<const Prompt*>& batch) {
  std::vector<int> rows;
  for (const Prompt* p : batch) rows.push_back(std::stoi(p->text.substr(9)));
  return rows;
}

TEST(PromptDataset, ReadsFieldsAndTokenizes) {
  PromptDataOptions o;
  o.path = write_lines({R"({"input": "What is 2+2?", "answer": 4, "metadata": {"k": 1}})",
                        R"({"input": "Hi", "answer": "x", "tools": "[{\"name\": \"f\"}]"})"});
  o.label_key = "answer";
  auto ds = load(o);
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.at(0).text, "What is 2+2?");
  EXPECT_EQ(ds.at(0).ids, qwen().encode("What is 2+2?"));
  EXPECT_EQ(ds.at(0).label.value(), "4");  // non-string labels are serialized
  EXPECT_EQ(ds.at(0).metadata["k"], 1);
  EXPECT_EQ(ds.at(1).label.value(), "x");
  EXPECT_EQ(ds.at(1).metadata["tools"][0]["name"], "f");
}

// --tool-key names the field; the tools still land in metadata["tools"], and the default field
// is then ignored.
TEST(PromptDataset, ToolKeyNamesTheToolsField) {
  PromptDataOptions o;
  o.path = write_lines(
      {R"({"input": "Hi", "my_tools": [{"name": "calc"}], "tools": [{"name": "other"}]})"});
  o.tool_key = "my_tools";
  auto ds = load(o);
  ASSERT_EQ(ds.size(), 1);
  EXPECT_EQ(ds.at(0).metadata["tools"][0]["name"], "calc");
}

TEST(PromptDataset, AppliesTheChatTemplate) {
  PromptDataOptions o;
  o.path = write_lines({R"({"input": "What is 2+2?"})",
                        R"({"input": [{"role": "system", "content": "Be brief."}, )"
                        R"({"role": "user", "content": "Hi"}]})"});
  // Without --apply-chat-template a string stays raw, a message list is still templated (the
  // generate step would template it).
  auto raw = load(o);
  EXPECT_EQ(raw.at(0).text, "What is 2+2?");
  OrderedJson msgs = OrderedJson::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(raw.at(1).text, qwen_chat().apply(msgs, true));
  o.apply_chat_template = true;
  o.apply_chat_template_kwargs = {{"enable_thinking", false}};
  auto ds = load(o);
  OrderedJson user = OrderedJson::parse(R"([{"role": "user", "content": "What is 2+2?"}])");
  std::string expected = qwen_chat().apply(user, true, {{"enable_thinking", false}});
  EXPECT_EQ(ds.at(0).text, expected);
  EXPECT_NE(expected.find("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos);
  EXPECT_EQ(ds.at(0).ids, qwen().encode(expected));
  EXPECT_TRUE(ds.at(0).prompt.is_string());  // the row's own value is kept
}

TEST(PromptDataset, LengthFilterAndSlices) {
  PromptDataOptions o;
  o.path = write_lines({R"({"input": "short"})",
                        R"({"input": "a much longer prompt with many many words in it"})",
                        R"({"input": "tiny"})"});
  o.max_prompt_len = 3;
  auto ds = load(o);
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.num_dropped_too_long(), 1);
  EXPECT_EQ(ds.at(1).text, "tiny");

  PromptDataOptions s;
  s.path = numbered_file(10) + "@[2:5]";
  auto sliced = load(s);
  ASSERT_EQ(sliced.size(), 3);
  EXPECT_EQ(sliced.at(0).text, "question 2");
  s.path = numbered_file(10) + "@[-2:]";
  EXPECT_EQ(load(s).at(0).text, "question 8");
  auto parsed = parse_path_slice("a@b.jsonl@[:7]");
  EXPECT_EQ(parsed.file, "a@b.jsonl");
  EXPECT_FALSE(parsed.start.has_value());
  EXPECT_EQ(parsed.end.value(), 7);
}

TEST(PromptDataset, ErrorsNameTheFileLineAndField) {
  PromptDataOptions o;
  o.path = write_lines({});
  EXPECT_NE(error_of([&] { load(o); }).find("contains no rows"), std::string::npos);
  o.path = write_lines({R"({"input": "ok"})", R"({"input": )"});
  std::string err = error_of([&] { load(o); });
  EXPECT_NE(err.find("prompts.jsonl:2"), std::string::npos) << err;
  o.path = write_lines({R"({"input": "ok"})", R"({"question": "x"})"});
  err = error_of([&] { load(o); });
  EXPECT_NE(err.find(":2: the prompt field 'input' (--input-key) is missing"), std::string::npos)
      << err;
  o.path = write_lines({R"({"input": 5})"});
  err = error_of([&] { load(o); });
  EXPECT_NE(err.find("must be a string or a list of messages, got integer"), std::string::npos)
      << err;
  o.path = write_lines({R"({"input": "x"})"});
  o.label_key = "label";
  err = error_of([&] { load(o); });
  EXPECT_NE(err.find(":1: the label field 'label' (--label-key) is missing"), std::string::npos)
      << err;
  o.label_key.clear();
  o.path = write_lines({R"({"input": "x", "metadata": [1]})"});
  EXPECT_NE(error_of([&] { load(o); }).find("'metadata' (--metadata-key) must be an object"),
            std::string::npos);
  o.path = write_lines({R"({"input": [{"content": "no role"}]})"});
  EXPECT_NE(error_of([&] { load(o); }).find("with a string 'role'"), std::string::npos);
  o.path = write_lines({R"({"input": [{"role": "user", "content": "x"}]})"});
  EXPECT_NE(error_of([&] { PromptDataset(o, qwen(), nullptr); }).find("chat template"),
            std::string::npos);
  o.path = (testing::scratch_dir() / "p.parquet").string();
  EXPECT_NE(error_of([&] { load(o); }).find("parquet prompt files are not supported"),
            std::string::npos);
  o.path = numbered_file(3) + "@[5:9]";
  EXPECT_NE(error_of([&] { load(o); }).find("selects no rows"), std::string::npos);
}

TEST(PromptShuffle, FixedFirstPermutations) {
  // Python: random.seed(42); l = list(range(10)); random.shuffle(l)
  EXPECT_EQ(epoch_permutation(10, 42, 0), (std::vector<int64_t>{7, 3, 2, 8, 5, 6, 9, 4, 0, 1}));
  // epoch 1 uses seed 43
  EXPECT_EQ(epoch_permutation(10, 42, 1), (std::vector<int64_t>{8, 1, 5, 6, 9, 7, 3, 2, 4, 0}));
  EXPECT_EQ(epoch_permutation(5, 0, 0), (std::vector<int64_t>{2, 1, 0, 4, 3}));
}

TEST(PromptShuffle, MatchesPythonRandomShuffle) {
  const std::vector<std::pair<int64_t, uint64_t>> cases = {
      {1, 42}, {2, 7}, {17, 42}, {1000, 42}, {4097, 123456789}, {300, (uint64_t{1} << 40) + 3}};
  Json input = Json::object();
  input["shuffle"] = Json::array();
  for (auto [n, seed] : cases) input["shuffle"].push_back({n, seed});
  auto dir = testing::cached_oracle(
      "prompt_shuffle", "oracles/reward_text_oracle.py", input.dump(), [&](const auto& d) {
        write_file_atomic(d / "cases.json", input.dump());
        return std::vector<std::string>{(d / "cases.json").string(), (d / "out.json").string()};
      });
  Json out = read_json_file(dir / "out.json");
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(epoch_permutation(cases[i].first, cases[i].second, 0),
              out["shuffle"][i].get<std::vector<int64_t>>())
        << "n=" << cases[i].first << " seed=" << cases[i].second;
  }
}

TEST(PromptDataset, BatchesWrapIntoReshuffledEpochs) {
  PromptDataOptions o;
  o.path = numbered_file(10);
  o.shuffle = true;
  auto ds = load(o);
  EXPECT_EQ(rows_of(ds.next_batch(4)), (std::vector<int>{7, 3, 2, 8}));
  EXPECT_EQ(rows_of(ds.next_batch(4)), (std::vector<int>{5, 6, 9, 4}));
  EXPECT_EQ(rows_of(ds.next_batch(4)), (std::vector<int>{0, 1, 8, 1}));  // epoch 1 starts
  EXPECT_EQ(ds.epoch(), 1);
  EXPECT_EQ(ds.offset(), 2);
  // A batch longer than the dataset spans several epochs.
  EXPECT_EQ(ds.next_batch(25).size(), 25u);
  EXPECT_EQ(ds.epoch(), 3);
  o.shuffle = false;
  auto plain = load(o);
  EXPECT_EQ(rows_of(plain.next_batch(12)), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}));
}

TEST(PromptDataset, ResumeContinuesWithTheSamePrompts) {
  PromptDataOptions o;
  o.path = numbered_file(7);
  o.shuffle = true;
  o.seed = 5;
  auto full = load(o);
  std::vector<int> expected;
  for (int b = 0; b < 9; ++b) {
    auto rows = rows_of(full.next_batch(3));
    expected.insert(expected.end(), rows.begin(), rows.end());
  }
  auto first = load(o);
  std::vector<int> got;
  for (int b = 0; b < 4; ++b) {
    auto rows = rows_of(first.next_batch(3));
    got.insert(got.end(), rows.begin(), rows.end());
  }
  Json saved = Json::parse(first.state().dump());
  auto resumed = load(o);
  resumed.load_state(saved);
  for (int b = 0; b < 5; ++b) {
    auto rows = rows_of(resumed.next_batch(3));
    got.insert(got.end(), rows.begin(), rows.end());
  }
  EXPECT_EQ(got, expected);

  Json wrong = saved;
  wrong["num_prompts"] = 8;
  EXPECT_NE(error_of([&] { resumed.load_state(wrong); }).find("dataset of 8 prompts"),
            std::string::npos);
  wrong = saved;
  wrong["offset"] = 99;
  EXPECT_NE(error_of([&] { resumed.load_state(wrong); }).find("offset 99"), std::string::npos);
}

TEST(RolloutDataSource, GroupsCarryRunningIdsAcrossResume) {
  PromptDataOptions o;
  o.path = numbered_file(3);
  o.label_key = "input";
  auto ds = load(o);
  RolloutDataSource source(ds, 4);
  auto groups = source.next_groups(2);
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_EQ(groups[1].size(), 4u);
  EXPECT_EQ(groups[1][0].group_index, 1);
  EXPECT_EQ(groups[1][0].index, 4);
  EXPECT_EQ(groups[1][3].index, 7);
  EXPECT_EQ(groups[1][2].status, rl::SampleStatus::kPending);
  EXPECT_EQ(groups[1][2].tokens, ds.at(1).ids);
  EXPECT_EQ(groups[1][2].response_length, 0);
  EXPECT_EQ(groups[1][2].label, "question 1");
  EXPECT_EQ(groups[1][2].prompt, "question 1");
  Json state = source.state();
  auto ds2 = load(o);
  RolloutDataSource resumed(ds2, 4);
  resumed.load_state(state);
  auto next = resumed.next_groups(2);
  EXPECT_EQ(next[0][0].group_index, 2);
  EXPECT_EQ(next[0][0].index, 8);
  EXPECT_EQ(next[1][0].label, "question 0");  // wrapped into epoch 1

  // Buffered (partial-rollout) groups are served before fresh prompts.
  RolloutBuffer buffer(4);
  buffer.add({groups[0]}, 3);
  auto mixed = resumed.next_groups(2, &buffer);
  EXPECT_EQ(mixed[0][0].group_index, 0);
  EXPECT_EQ(mixed[0][0].metadata["start_rollout_id"], 3);
  EXPECT_EQ(mixed[1][0].group_index, 4);
  EXPECT_EQ(buffer.size(), 0);
}

}  // namespace
}  // namespace furlong::data
