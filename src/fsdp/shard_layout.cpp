#include "fsdp/shard_layout.h"

#include <algorithm>

#include "core/error.h"

namespace furlong::fsdp {

ShardLayout ShardLayout::make(std::string name, std::vector<int64_t> shape, int shard_index,
                              int shard_count) {
  FURLONG_ASSERT(shard_count >= 1 && shard_index >= 0 && shard_index < shard_count,
                 "bad shard index ", shard_index, "/", shard_count);
  ShardLayout l;
  l.name = std::move(name);
  l.shape = std::move(shape);
  for (size_t d = 1; d < l.shape.size(); ++d) l.row_numel *= l.shape[d];
  int64_t rows = l.rows();
  l.rows_per_rank = std::max<int64_t>(1, (rows + shard_count - 1) / shard_count);
  l.row_begin = std::min<int64_t>(rows, shard_index * l.rows_per_rank);
  l.local_rows = std::min<int64_t>(rows, l.row_begin + l.rows_per_rank) - l.row_begin;
  return l;
}

std::vector<int64_t> ShardLayout::local_shape() const {
  std::vector<int64_t> s = shape.empty() ? std::vector<int64_t>{} : shape;
  if (!s.empty()) s[0] = local_rows;
  return s;
}

int64_t assign_flat_offsets(std::vector<ShardLayout>& layouts) {
  int64_t offset = 0;
  for (auto& l : layouts) {
    l.flat_offset = offset;
    offset += l.padded_shard_numel();
  }
  return offset;
}

}  // namespace furlong::fsdp
