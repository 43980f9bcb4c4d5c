// The data-parallel device mesh of the FSDP backend: world W = R x S ranks, R = dp_replicate
// (default 1), S = dp_shard = W / R. Rank r has replicate index r / S and shard index r % S
// (row-major, as PyTorch's DeviceMesh). Parameters are sharded over the shard group and
// replicated over the replicate group (HSDP). Context, tensor, pipeline and expert parallel
// sizes are 1: their groups are real single-rank groups.
#pragma once

#include <memory>

#include "dist/process_group.h"

namespace furlong::dist {

class Mesh {
 public:
  // Validates W % R == 0 (error says what to do) and builds the groups; collective over world
  // (every rank calls it, in the same order as other collectives; it ends with a world barrier).
  static std::unique_ptr<Mesh> build(ProcessGroups& groups, int dp_replicate_size);
  // The validation alone (no communication), for checking flags before the run starts.
  static void validate(int world_size, int dp_replicate_size);

  int world_size() const;
  int replicate_size() const;  // R
  int shard_size() const;      // S
  int replicate_index() const;
  int shard_index() const;

  Group& dp();            // all W ranks (the flat data-parallel view; the world group)
  Group& dp_shard();      // the S ranks sharing this rank's replicate index
  Group& dp_replicate();  // the R ranks sharing this rank's shard index
  Group& cp();            // single-rank
  Group& tp();            // single-rank

 private:
  Mesh() = default;
  ProcessGroups* groups_ = nullptr;
  int replicate_size_ = 1;
  int shard_size_ = 1;
  std::unique_ptr<Group> dp_shard_, dp_replicate_, cp_, tp_;
};

}  // namespace furlong::dist
