// furlong score: per-token log-probs and entropies of JSONL rows under a HF model.
//
// Row i holds tokens x_0..x_{n-1}; the output has, for t = s..n-1, log p(x_t | x_<t) and the
// entropy of p(. | x_<t), where s = prompt_len if the row gives one, else 1 (so n - s values).
// Rows are packed into forward passes of at most --max-tokens-per-batch tokens; attention never
// crosses rows.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "app/common.h"
#include "core/dtype.h"
#include "core/jsonl.h"
#include "core/log.h"
#include "core/progress.h"
#include "models/hf_model.h"
#include "models/logprobs.h"

namespace furlong::app {
namespace {

struct ScoreRow {
  std::vector<int64_t> ids;
  int64_t first_scored = 1;  // index of the first token whose log-prob is reported
};

ScoreRow parse_row(const JsonlRow& row, const LazyTokenizer& tokenizer, bool add_special,
                   int64_t vocab_size) {
  ScoreRow out;
  out.ids = row_token_ids(row, tokenizer, add_special, vocab_size);
  FURLONG_CHECK(!out.ids.empty(), row.where, ": the row has no tokens");
  auto prompt_len = json_get_optional<int64_t>(row.value, "prompt_len", row.where);
  if (prompt_len) {
    FURLONG_CHECK(*prompt_len >= 1 && *prompt_len <= static_cast<int64_t>(out.ids.size()),
                  row.where, ": prompt_len must be in [1, ", out.ids.size(), "], got ",
                  *prompt_len);
    out.first_scored = *prompt_len;
  }
  return out;
}

// Scores rows [begin, end) in one packed forward pass; appends one output line per row.
void score_batch(const models::CausalLM& model, const std::vector<ScoreRow>& rows, size_t begin,
                 size_t end, const models::ForwardOptions& forward,
                 std::vector<std::string>& lines) {
  std::vector<std::vector<int64_t>> docs;
  std::vector<int64_t> positions, targets;  // packed rows whose next token is scored
  int64_t offset = 0;
  for (size_t r = begin; r < end; ++r) {
    const auto& ids = rows[r].ids;
    docs.push_back(ids);
    for (int64_t t = rows[r].first_scored; t < static_cast<int64_t>(ids.size()); ++t) {
      positions.push_back(offset + t - 1);
      targets.push_back(ids[t]);
    }
    offset += static_cast<int64_t>(ids.size());
  }
  at::Tensor lp_T, ent_T;
  if (!positions.empty()) {
    auto batch = models::PackedBatch::from_documents(docs);
    auto hidden_PD = model.forward_hidden(batch, forward);
    const auto& w = model.weights();
    auto n = static_cast<int64_t>(positions.size());
    auto rows_T = at::from_blob(positions.data(), {n}, at::kLong);
    auto result = models::token_logprobs(hidden_PD.index_select(0, rows_T),
                                         model.head_weight(w[0], w[model.final_unit()]),
                                         at::from_blob(targets.data(), {n}, at::kLong));
    lp_T = result.logprobs_T.contiguous();
    ent_T = result.entropy_T.contiguous();
  }
  int64_t k = 0;
  for (size_t r = begin; r < end; ++r) {
    int64_t n = static_cast<int64_t>(rows[r].ids.size()) - rows[r].first_scored;
    const float* lp = n > 0 ? lp_T.data_ptr<float>() + k : nullptr;
    const float* ent = n > 0 ? ent_T.data_ptr<float>() + k : nullptr;
    lines.push_back("{\"logprobs\":" + floats_to_json_array(lp, n) +
                    ",\"entropy\":" + floats_to_json_array(ent, n) + "}");
    k += n;
  }
}

}  // namespace

int run_score(const std::vector<std::string>& args) {
  ScoreOptions o;
  config::FlagSet flags("furlong score",
                        "Per-token log-probs and entropies of JSONL rows under a HF model.");
  register_flags(flags, o);
  if (!flags.parse(args)) return 0;
  apply_runtime_options(o.runtime);
  models::ForwardOptions forward{
      .attn = models::parse_attn_impl(o.attn_implementation, "--attn-implementation"),
      .fused_kernels = o.fused_kernels,
      .moe = {}};
  FURLONG_CHECK(o.max_tokens_per_batch > 0, "--max-tokens-per-batch must be positive");

  models::LoadOptions load;
  if (!o.dtype.empty()) load.dtype = parse_dtype(o.dtype, "--dtype");
  if (!o.lora_adapter_path.empty()) load.lora_adapter = o.lora_adapter_path;
  auto model = models::load_hf_model(o.hf_checkpoint, load);
  LazyTokenizer tokenizer(o.hf_checkpoint);
  std::vector<ScoreRow> rows;
  int64_t total_tokens = 0;
  for (const auto& row : read_jsonl(o.input)) {
    rows.push_back(parse_row(row, tokenizer, o.add_special_tokens, model->config().vocab_size));
    total_tokens += static_cast<int64_t>(rows.back().ids.size());
  }
  LOG_INFO("scoring ", rows.size(), " rows (", total_tokens, " tokens) with ",
           model->config().architecture, " from ", o.hf_checkpoint);

  c10::InferenceMode inference;
  std::vector<std::string> lines;
  ProgressBar progress("score", total_tokens, "tok");
  auto start = std::chrono::steady_clock::now();
  for (size_t begin = 0; begin < rows.size();) {
    size_t end = begin;
    int64_t tokens = 0;
    while (end < rows.size() &&
           (end == begin ||
            tokens + static_cast<int64_t>(rows[end].ids.size()) <= o.max_tokens_per_batch)) {
      tokens += static_cast<int64_t>(rows[end++].ids.size());
    }
    score_batch(*model, rows, begin, end, forward, lines);
    progress.advance(tokens);
    begin = end;
  }
  progress.finish();
  JsonlWriter writer(o.output);
  for (const auto& line : lines) writer.write_line(line);
  writer.commit();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG_INFO("wrote ", o.output, " (", rows.size(), " rows, ",
           static_cast<int64_t>(total_tokens / std::max(seconds, 1e-9)), " tokens/s)");
  return 0;
}

}  // namespace furlong::app
