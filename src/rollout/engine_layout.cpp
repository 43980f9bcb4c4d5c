#include "rollout/engine_layout.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace furlong::rollout {
namespace {

void check_gpus_per_engine(const RolloutOptions& r) {
  FURLONG_CHECK(r.rollout_num_gpus_per_engine >= 1,
                "--rollout-num-gpus-per-engine must be >= 1, got ", r.rollout_num_gpus_per_engine);
}

void check_divides(int64_t gpus, int64_t per_engine, const char* what) {
  FURLONG_CHECK(gpus % per_engine == 0, "--rollout-num-gpus-per-engine ", per_engine,
                " must divide ", what, " (", gpus, "): every engine takes a whole group of GPUs");
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

int64_t EngineLayout::engine_on_rank(int rank) const {
  for (size_t e = 0; e < engine_ranks.size(); ++e) {
    if (engine_ranks[e] == rank) return static_cast<int64_t>(e);
  }
  return -1;
}

int64_t EngineLayout::engines_on_host(int rank, int local_rank, int local_world_size) const {
  const int first = rank - local_rank;
  int64_t count = 0;
  for (int r : engine_ranks) count += r >= first && r < first + local_world_size ? 1 : 0;
  return count;
}

std::string EngineLayout::describe(int64_t threads_per_engine) const {
  std::ostringstream s;
  s << "colocated: " << num_engines() << (num_engines() == 1 ? " engine" : " engines") << " on rank"
    << (num_engines() == 1 ? " " : "s ") << join_ranks(engine_ranks) << " of " << world_size << ", "
    << threads_per_engine << " thread(s) each";
  std::vector<int> idle;
  for (int rank = 0; rank < world_size; ++rank) {
    if (engine_on_rank(rank) < 0) idle.push_back(rank);
  }
  if (gpus_per_engine > 1) {
    s << "; --rollout-num-gpus-per-engine " << gpus_per_engine
      << ": no tensor parallelism in furlong's engine, each engine runs on its group's first rank";
  }
  if (!idle.empty()) s << "; rank(s) " << join_ranks(idle) << " train only (idle while generating)";
  return s.str();
}

EngineLayout colocated_engine_layout(const RolloutOptions& r, int world_size) {
  check_gpus_per_engine(r);
  const int64_t gpus = r.rollout_num_gpus.value_or(world_size);
  FURLONG_CHECK(gpus >= 1 && gpus <= world_size, "--rollout-num-gpus ", gpus,
                " with --colocate must lie in [1, ", world_size,
                "] (the training ranks): colocated engines live inside training ranks");
  check_divides(gpus, r.rollout_num_gpus_per_engine, "--rollout-num-gpus");
  EngineLayout layout;
  layout.world_size = world_size;
  layout.gpus_per_engine = r.rollout_num_gpus_per_engine;
  for (int64_t rank = 0; rank < gpus; rank += r.rollout_num_gpus_per_engine) {
    layout.engine_ranks.push_back(static_cast<int>(rank));
  }
  return layout;
}

int64_t disaggregated_num_engines(const RolloutOptions& r) {
  check_gpus_per_engine(r);
  if (!r.rollout_num_gpus) return r.rollout_num_engines;
  FURLONG_CHECK(*r.rollout_num_gpus >= 1, "--rollout-num-gpus must be >= 1, got ",
                *r.rollout_num_gpus);
  check_divides(*r.rollout_num_gpus, r.rollout_num_gpus_per_engine, "--rollout-num-gpus");
  return *r.rollout_num_gpus / r.rollout_num_gpus_per_engine;
}

void validate_engine_layout(const RolloutOptions& r, int world_size) {
  if (r.colocate) {
    colocated_engine_layout(r, world_size);
  } else {
    disaggregated_num_engines(r);
  }
}

std::vector<int64_t> split_groups_over_engines(int64_t num_groups, int64_t num_engines) {
  FURLONG_ASSERT(num_engines >= 1, "split_groups_over_engines: no engines");
  std::vector<int64_t> engine_of(static_cast<size_t>(std::max<int64_t>(num_groups, 0)));
  const int64_t base = num_groups / num_engines, extra = num_groups % num_engines;
  int64_t g = 0;
  for (int64_t e = 0; e < num_engines; ++e) {
    const int64_t count = base + (e < extra ? 1 : 0);
    for (int64_t i = 0; i < count; ++i) engine_of[static_cast<size_t>(g++)] = e;
  }
  return engine_of;
}

}  // namespace furlong::rollout
