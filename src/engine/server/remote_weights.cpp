#include "engine/server/remote_weights.h"

#include <exception>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "core/error.h"

namespace furlong::engine::server {
namespace {

// Runs call(i) for every engine on its own thread while `local` runs here; rethrows the first
// failure (local first: a failed collective explains the HTTP errors that follow it).
void with_engines_concurrently(size_t count, const std::function<void(size_t)>& call,
                               const std::function<void()>& local) {
  std::vector<std::future<void>> calls;
  for (size_t i = 0; i < count; ++i) calls.push_back(std::async(std::launch::async, call, i));
  std::exception_ptr failure;
  try {
    local();
  } catch (...) {
    failure = std::current_exception();
  }
  for (auto& c : calls) {
    try {
      c.get();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

std::unique_ptr<dist::ProcessGroups> connect_remote_engines(
    const std::vector<const EngineClient*>& engines, WeightGroupSpec spec) {
  FURLONG_CHECK(!engines.empty(), "connect_remote_engines: no engines");
  spec.world_size = static_cast<int>(engines.size()) + 1;
  std::unique_ptr<dist::ProcessGroups> group;
  // An engine that refuses to join leaves this side waiting in the rendezvous until its bound;
  // its answer, not the rendezvous's "1 of 2 ranks joined", says what went wrong.
  std::vector<std::string> refusals(engines.size());
  try {
    with_engines_concurrently(
        engines.size(),
        [&](size_t i) {
          WeightGroupSpec mine = spec;
          mine.rank_offset = static_cast<int>(i) + 1;
          try {
            engines[i]->init_weights_update_group(mine);
          } catch (const std::exception& e) {
            refusals[i] = e.what();
            throw;
          }
        },
        [&] { group = join_weight_group(spec, 0); });
  } catch (const std::exception& e) {
    std::string why;
    for (const auto& r : refusals) {
      if (!r.empty()) why += "; " + r;
    }
    if (why.empty()) throw;
    FURLONG_FAIL("the weight update group did not form: an engine refused to join", why,
                 " (rendezvous: ", e.what(), ")");
  }
  return group;
}

void update_remote_weights(const std::vector<const EngineClient*>& engines, dist::Group& group,
                           const NamedTensors& named, int64_t version,
                           const std::string& group_name) {
  auto metas = weight_metas(named);
  with_engines_concurrently(
      engines.size(),
      [&](size_t i) { engines[i]->update_weights_from_distributed(metas, version, group_name); },
      [&] { broadcast_weights(group, named); });
}

}  // namespace furlong::engine::server
