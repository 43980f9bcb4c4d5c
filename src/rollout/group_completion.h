// Which prompt groups of a generation round have all their samples back, and the order the
// driver takes them in: completion order, or group order (with several engines, so that what is
// kept does not depend on which engine finished first). Engine threads report finished samples;
// the driver thread takes groups. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

namespace furlong::rollout {

class GroupCompletion {
 public:
  // `group_sizes[g]` samples in group g; `in_group_order`: take groups in index order.
  GroupCompletion(const std::vector<size_t>& group_sizes, bool in_group_order);
  // A sample of `group` that needs no request (already finished, or no token budget).
  void skip_sample(size_t group);
  // A request for a sample of `group` is about to be submitted.
  void expect_request();
  // The request of a sample of `group` came back: `record` runs under the lock (so records are
  // serialized however many engine threads report), then the sample counts as done.
  void request_done(size_t group, const std::function<void()>& record);
  // Blocks until a group can be taken and returns it, or returns nullopt once nothing is in
  // flight and no group is ready (groups never completed are then not returned).
  std::optional<size_t> next();

 private:
  void sample_done(size_t group);  // under mu_
  bool ready() const;              // under mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<size_t> remaining_;
  std::vector<char> complete_;
  std::deque<size_t> completed_;  // completion order
  const bool in_group_order_;
  size_t next_in_order_ = 0;
  int64_t outstanding_ = 0;
};

}  // namespace furlong::rollout
