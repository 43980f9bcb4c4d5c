// The dp_replicate x dp_shard mesh. Group names are "mesh<k>/<dim>/<index>" where k counts the
// meshes built in this run (every rank builds the same meshes in the same order, so names agree
// across ranks and never repeat).
#include "dist/mesh.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "core/strings.h"

namespace furlong::dist {

namespace {

std::string divisors_of(int n) {
  std::vector<std::string> parts;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) parts.push_back(std::to_string(d));
  }
  return join(parts, ", ");
}

}  // namespace

void Mesh::validate(int world_size, int dp_replicate_size) {
  FURLONG_CHECK(dp_replicate_size >= 1, "--dp-replicate-size ", dp_replicate_size,
                " must be at least 1 (1 = no replication: shard over all ", world_size, " ranks)");
  FURLONG_CHECK(world_size % dp_replicate_size == 0, "--dp-replicate-size ", dp_replicate_size,
                " does not divide the world size ", world_size, "; choose a divisor of ",
                world_size, " (", divisors_of(world_size), ")");
}

std::unique_ptr<Mesh> Mesh::build(ProcessGroups& groups, int dp_replicate_size) {
  const int world = groups.world().size();
  const int rank = groups.world().rank();
  validate(world, dp_replicate_size);
  std::unique_ptr<Mesh> mesh(new Mesh());
  mesh->groups_ = &groups;
  mesh->replicate_size_ = dp_replicate_size;
  mesh->shard_size_ = world / dp_replicate_size;
  const int S = mesh->shard_size_;
  const int i = rank / S;  // replicate index
  const int j = rank % S;  // shard index
  const std::string prefix = "mesh" + std::to_string(groups.next_mesh_index()) + "/";

  std::vector<int> shard_members, replicate_members;
  for (int k = 0; k < S; ++k) shard_members.push_back(i * S + k);
  for (int k = 0; k < dp_replicate_size; ++k) replicate_members.push_back(k * S + j);
  // Shard groups are disjoint, then replicate groups are disjoint: building in this order on
  // every rank cannot deadlock (each blocking connect involves only members of one group).
  mesh->dp_shard_ = groups.new_group(shard_members, prefix + "dp_shard/" + std::to_string(i));
  mesh->dp_replicate_ =
      groups.new_group(replicate_members, prefix + "dp_replicate/" + std::to_string(j));
  mesh->cp_ = groups.new_group({rank}, prefix + "cp/" + std::to_string(rank));
  mesh->tp_ = groups.new_group({rank}, prefix + "tp/" + std::to_string(rank));
  // Nobody proceeds (or exits, taking the store with it) until every group is connected.
  groups.world().barrier();
  return mesh;
}

int Mesh::world_size() const {
  return replicate_size_ * shard_size_;
}
int Mesh::replicate_size() const {
  return replicate_size_;
}
int Mesh::shard_size() const {
  return shard_size_;
}
int Mesh::replicate_index() const {
  return groups_->world().rank() / shard_size_;
}
int Mesh::shard_index() const {
  return groups_->world().rank() % shard_size_;
}

Group& Mesh::dp() {
  return groups_->world();
}
Group& Mesh::dp_shard() {
  return *dp_shard_;
}
Group& Mesh::dp_replicate() {
  return *dp_replicate_;
}
Group& Mesh::cp() {
  return *cp_;
}
Group& Mesh::tp() {
  return *tp_;
}

}  // namespace furlong::dist
