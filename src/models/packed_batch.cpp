#include "models/packed_batch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "core/error.h"

namespace furlong::models {

int64_t PackedBatch::max_document_length() const {
  int64_t longest = 0;
  for (size_t i = 0; i + 1 < cu_seqlens.size(); ++i)
    longest = std::max(longest, cu_seqlens[i + 1] - cu_seqlens[i]);
  return longest;
}

bool PackedBatch::has_prefixes() const {
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [](const SharedPrefix& p) { return p.length > 0; });
}

const PackedBatch::SharedPrefix& PackedBatch::prefix(int64_t document) const {
  static const SharedPrefix kNone;
  return prefixes.empty() ? kNone : prefixes[static_cast<size_t>(document)];
}

PackedBatch PackedBatch::from_documents(const std::vector<std::vector<int64_t>>& documents) {
  std::vector<int64_t> tokens, positions;
  PackedBatch batch;
  batch.cu_seqlens.push_back(0);
  for (const auto& doc : documents) {
    FURLONG_CHECK(!doc.empty(), "packed batch: empty documents are not allowed");
    for (size_t i = 0; i < doc.size(); ++i) {
      tokens.push_back(doc[i]);
      positions.push_back(static_cast<int64_t>(i));
    }
    batch.cu_seqlens.push_back(static_cast<int64_t>(tokens.size()));
  }
  auto n = static_cast<int64_t>(tokens.size());
  batch.tokens_P = at::from_blob(tokens.data(), {n}, at::kLong).clone();
  batch.position_ids_P = at::from_blob(positions.data(), {n}, at::kLong).clone();
  return batch;
}

PackedBatch PackedBatch::from_positions(const at::Tensor& tokens_P,
                                        const at::Tensor& position_ids_P) {
  FURLONG_CHECK(tokens_P.dim() == 1 && position_ids_P.dim() == 1 &&
                    tokens_P.size(0) == position_ids_P.size(0),
                "packed batch: tokens and position ids must be 1-D of equal length, got ",
                tokens_P.sizes(), " and ", position_ids_P.sizes());
  PackedBatch batch;
  batch.tokens_P = tokens_P.to(at::kLong);
  batch.position_ids_P = position_ids_P.to(at::kLong);
  auto pos = batch.position_ids_P.cpu().contiguous();
  const int64_t* p = pos.data_ptr<int64_t>();
  int64_t n = pos.size(0);
  batch.cu_seqlens.push_back(0);
  for (int64_t t = 1; t < n; ++t) {
    if (p[t] != p[t - 1] + 1) batch.cu_seqlens.push_back(t);
  }
  if (n > 0) batch.cu_seqlens.push_back(n);
  return batch;
}

PackedBatch PackedBatch::to(c10::Device device) const {
  PackedBatch out = *this;
  out.tokens_P = tokens_P.to(device);
  out.position_ids_P = position_ids_P.to(device);
  return out;
}

namespace {

// Appends tokens[begin, end) as one document at positions first_position, +1, ...
void append_document(const std::vector<int64_t>& tokens, int64_t begin, int64_t end,
                     int64_t first_position, PackedBatch::SharedPrefix prefix,
                     std::vector<int64_t>& packed, std::vector<int64_t>& positions,
                     PackedBatch& batch) {
  for (int64_t j = begin; j < end; ++j) {
    packed.push_back(tokens[static_cast<size_t>(j)]);
    positions.push_back(first_position + (j - begin));
  }
  batch.cu_seqlens.push_back(static_cast<int64_t>(packed.size()));
  batch.prefixes.push_back(prefix);
}

}  // namespace

PackedSequences pack_sequences(const std::vector<const std::vector<int64_t>*>& tokens,
                               const std::vector<int64_t>& prompt_lengths, bool share_prompts) {
  FURLONG_CHECK(tokens.size() == prompt_lengths.size(), "pack_sequences: ", tokens.size(),
                " sequences but ", prompt_lengths.size(), " prompt lengths");
  PackedSequences out;
  std::vector<int64_t> packed, positions;
  out.batch.cu_seqlens.push_back(0);
  std::map<std::vector<int64_t>, int64_t> prompt_rows;  // distinct prompt -> its first row
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto& seq = *tokens[i];
    const auto n = static_cast<int64_t>(seq.size()), prompt = prompt_lengths[i];
    FURLONG_CHECK(n > 0 && prompt >= 0 && prompt <= n, "pack_sequences: sequence ", i, " has ", n,
                  " tokens and a prompt of ", prompt, "; expected 0 <= prompt <= tokens, > 0");
    out.prompt_length.push_back(share_prompts ? prompt : 0);
    if (!share_prompts || prompt == 0) {
      out.prompt_row.push_back(static_cast<int64_t>(packed.size()));
      out.rest_row.push_back(static_cast<int64_t>(packed.size()));
      append_document(seq, 0, n, 0, {}, packed, positions, out.batch);
      continue;
    }
    std::vector<int64_t> key(seq.begin(), seq.begin() + prompt);
    auto [it, fresh] = prompt_rows.try_emplace(std::move(key), static_cast<int64_t>(packed.size()));
    if (fresh) append_document(seq, 0, prompt, 0, {}, packed, positions, out.batch);
    out.prompt_row.push_back(it->second);
    out.rest_row.push_back(static_cast<int64_t>(packed.size()));
    if (prompt < n) {
      append_document(seq, prompt, n, prompt, {it->second, prompt}, packed, positions, out.batch);
    }
  }
  if (!out.batch.has_prefixes()) out.batch.prefixes.clear();
  const auto P = static_cast<int64_t>(packed.size());
  out.batch.tokens_P = at::from_blob(packed.data(), {P}, at::kLong).clone();
  out.batch.position_ids_P = at::from_blob(positions.data(), {P}, at::kLong).clone();
  return out;
}

}  // namespace furlong::models
