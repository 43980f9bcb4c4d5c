// How FSDP splits parameters: every parameter is sharded on dim 0 over the S ranks of the shard
// group (FSDP2 semantics). Rank s holds rows [s * R, min((s + 1) * R, d0)) with R = ceil(d0 / S);
// the last ranks may hold fewer (or zero) valid rows, padded to R rows in communication buffers.
// A unit's parameters are laid out back to back in one flat shard buffer (padded sizes), so one
// all-gather moves a whole unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace furlong::fsdp {

struct ShardLayout {
  std::string name;
  std::vector<int64_t> shape;  // global (unsharded) shape
  int64_t rows_per_rank = 0;   // R = ceil(d0 / S)
  int64_t row_numel = 1;       // elements per dim-0 row
  int64_t row_begin = 0;       // first global row held by this rank
  int64_t local_rows = 0;      // valid rows held by this rank (<= R)
  int64_t flat_offset = 0;     // offset of this parameter in the unit's flat shard (elements)

  static ShardLayout make(std::string name, std::vector<int64_t> shape, int shard_index,
                          int shard_count);

  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t full_numel() const { return rows() * row_numel; }
  int64_t padded_shard_numel() const { return rows_per_rank * row_numel; }
  int64_t local_numel() const { return local_rows * row_numel; }
  // Shape of this rank's valid rows.
  std::vector<int64_t> local_shape() const;
};

// Layouts of a unit's parameters with flat offsets filled in; returns the padded flat size.
int64_t assign_flat_offsets(std::vector<ShardLayout>& layouts);

}  // namespace furlong::fsdp
