// Packed inputs: several documents concatenated into one token sequence.
//
// P = total tokens. A document starts wherever position_ids does not continue the previous
// position by +1 (transformers' rule for packed rows; in practice positions restart at 0).
// Attention never crosses a document boundary, except into a document's shared prefix: rows of
// an earlier document that it sees as if they preceded its own tokens (a prompt held once for
// all the sequences that continue it; see pack_sequences).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace furlong::models {

struct PackedBatch {
  at::Tensor tokens_P;        // int64 [P]
  at::Tensor position_ids_P;  // int64 [P]
  // Document boundaries: doc i is [cu_seqlens[i], cu_seqlens[i+1]). Host-side copy.
  std::vector<int64_t> cu_seqlens;
  // Empty, or one per document: document d attends first to the packed rows
  // [start, start + length) (length 0: none), which lie in an earlier document, then causally
  // to its own rows; its positions continue the prefix's. Softmax attention honours it; a model
  // whose layers cannot (CausalLM::supports_shared_prefixes) refuses such a batch.
  struct SharedPrefix {
    int64_t start = 0;
    int64_t length = 0;
  };
  std::vector<SharedPrefix> prefixes;

  int64_t num_tokens() const { return cu_seqlens.empty() ? 0 : cu_seqlens.back(); }
  int64_t num_documents() const {
    return cu_seqlens.empty() ? 0 : static_cast<int64_t>(cu_seqlens.size()) - 1;
  }
  int64_t max_document_length() const;
  bool has_prefixes() const;
  const SharedPrefix& prefix(int64_t document) const;

  // Documents given as token lists; positions restart at 0 for each.
  static PackedBatch from_documents(const std::vector<std::vector<int64_t>>& documents);
  // Tokens and positions as given (1-D, same length); boundaries derived from positions.
  static PackedBatch from_positions(const at::Tensor& tokens_P, const at::Tensor& position_ids_P);
  // Moves the token/position tensors to `device`.
  PackedBatch to(c10::Device device) const;
};

// Sequences packed for one forward: sequence i is `tokens[i]`, its first prompt_lengths[i]
// tokens its prompt. Without sharing, each sequence is one document, in order. With
// share_prompts, each distinct prompt (equal token for token) is one document, and every
// sequence's tokens after its prompt are a document of their own with that prompt as their
// shared prefix, whether or not another sequence has the same prompt: so a token's arithmetic
// does not depend on which other sequences are packed with it. The result is the same model
// function as the unshared packing (each token sees the same tokens at the same positions) with
// each prompt computed once: a GRPO group of n samples costs prompt + n responses, not n times
// prompt + response. Gradients through a shared prompt are the sum over its sequences.
struct PackedSequences {
  PackedBatch batch;
  std::vector<int64_t> prompt_row;     // per sequence: packed row of its token 0
  std::vector<int64_t> rest_row;       // per sequence: packed row of its token prompt_length
  std::vector<int64_t> prompt_length;  // per sequence
  // The packed row that holds token j of sequence i.
  int64_t row(size_t i, int64_t j) const {
    return j < prompt_length[i] ? prompt_row[i] + j : rest_row[i] + (j - prompt_length[i]);
  }
};

PackedSequences pack_sequences(const std::vector<const std::vector<int64_t>*>& tokens,
                               const std::vector<int64_t>& prompt_lengths, bool share_prompts);

}  // namespace furlong::models
