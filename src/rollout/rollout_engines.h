// Where rollouts are generated, behind one interface for the RL loop: an engine inside the
// training process (--colocate) or `furlong serve` engine servers (disaggregated, started by
// furlong or given by --rollout-engine-urls). Generation is driven from training rank 0 only
// (colocated engines in other ranks get their share through rank 0, see generation_phase);
// weight sync is collective over all training ranks (the backend gathers full weights; rank 0
// hands them to engine servers, each colocated engine takes them in its own rank).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/weight_stream.h"
#include "engine/engine.h"
#include "rollout/options.h"

namespace furlong::dist {
class Group;
class ProcessGroups;
}  // namespace furlong::dist

namespace furlong::rollout {

class RolloutEngines {
 public:
  using Done = std::function<void(engine::GenerateOutput)>;
  virtual ~RolloutEngines() = default;

  // Rank 0 only. Queues a request; `done` runs on an engine or worker thread when it ends
  // (with finish reason abort after abort_all()).
  virtual void submit(engine::GenerateRequest request, Done done) = 0;
  // Engines the driver splits a round's prompt groups over (1: the engines route requests
  // themselves, and finished groups may be taken in completion order).
  virtual int64_t num_engines() const { return 1; }
  // Rank 0 only: submit() to engine `engine` (< num_engines()). A request may wait for
  // dispatch() (colocated engines hold every request until then, and queue each engine's share
  // at once, so that the engines' batches do not depend on the submitting loop's timing).
  virtual void submit_to(int64_t engine, engine::GenerateRequest request, Done done) {
    (void)engine;
    submit(std::move(request), std::move(done));
  }
  // Rank 0 only, after a round's submits: queues the waiting requests for rank 0's engine, hands
  // those for other ranks' engines to them and blocks until the latter are done (their `done`
  // runs on this thread).
  virtual void dispatch() {}
  // Collective over the training ranks: rank 0 runs `drive` (which generates through these
  // engines); the other ranks meanwhile serve their engines' share of every dispatch() until
  // `drive` returns.
  virtual void generation_phase(bool root, const std::function<void()>& drive) {
    if (root) drive();
  }
  virtual void abort_all() = 0;
  // Rank 0, once every request of an aborted round has returned: requests submitted from now on
  // run again (a later round, e.g. the next rollout of --train-async before any weight sync).
  virtual void end_abort() {}
  // Raises (on the caller's thread) the first error a background generation hit, if any.
  virtual void rethrow_errors() {}
  // Colocated memory hand-off around training (no-ops for servers).
  virtual void release_memory() {}
  virtual void resume_memory() {}
  // Collective over the training ranks: sends what `weights` streams (the backend's current
  // weights, TrainBackend::update_weights) to every engine as weight version `version`; with
  // `check_equal`, verifies by digest that every engine holds exactly the sent bits (error
  // otherwise). Returns the bytes sent (rank 0; 0 elsewhere).
  virtual int64_t sync_weights(const WeightSource& weights, int64_t version, bool check_equal) = 0;
  virtual std::string describe() const = 0;
};

// Engines inside the training processes, laid out by colocated_engine_layout
// (rollout/engine_layout.h): one per engine group, each on its rank's device and receiving the
// weights in its own rank.
std::unique_ptr<RolloutEngines> make_colocated_engines(const RolloutConfig& options,
                                                       dist::ProcessGroups& groups);
// Engine servers: --rollout-engine-urls, or --rollout-num-engines servers started here (rank 0
// starts them as child processes and stops them on exit). Weights travel over a process group
// (rank 0 + engines) by broadcast.
std::unique_ptr<RolloutEngines> make_remote_engines(const RolloutConfig& options, int rank);

}  // namespace furlong::rollout
