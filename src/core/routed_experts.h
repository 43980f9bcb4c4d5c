// Rollout routing replay (R3): the experts an MoE model's layers chose for every token of one
// sequence, as the rollout engine records them and the trainer replays them.
// ids[(t * num_layers + l) * top_k + k] is the k-th expert of token t in decoder layer l; -1
// marks dense layers and tokens that never ran through the model (a sequence's last token).
#pragma once

#include <cstdint>
#include <vector>

namespace furlong {

struct RoutedExperts {
  int64_t num_layers = 0;
  int64_t top_k = 0;
  std::vector<int32_t> ids;  // tokens * num_layers * top_k entries, or empty

  bool empty() const { return ids.empty(); }
  int64_t num_tokens() const {
    return num_layers * top_k == 0 ? 0 : ids.size() / (num_layers * top_k);
  }
};

}  // namespace furlong
