#include "rollout/group_completion.h"

namespace furlong::rollout {

GroupCompletion::GroupCompletion(const std::vector<size_t>& group_sizes, bool in_group_order)
    : remaining_(group_sizes), complete_(group_sizes.size(), 0), in_group_order_(in_group_order) {}

void GroupCompletion::skip_sample(size_t group) {
  std::lock_guard<std::mutex> lock(mu_);
  sample_done(group);
}

void GroupCompletion::expect_request() {
  std::lock_guard<std::mutex> lock(mu_);
  ++outstanding_;
}

void GroupCompletion::request_done(size_t group, const std::function<void()>& record) {
  std::lock_guard<std::mutex> lock(mu_);
  record();
  --outstanding_;
  sample_done(group);
  cv_.notify_all();
}

std::optional<size_t> GroupCompletion::next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready() || outstanding_ == 0; });
  if (!ready()) return std::nullopt;  // nothing (more) to take and nothing in flight
  if (in_group_order_) return next_in_order_++;
  const size_t group = completed_.front();
  completed_.pop_front();
  return group;
}

void GroupCompletion::sample_done(size_t group) {
  if (--remaining_[group] != 0) return;
  completed_.push_back(group);
  complete_[group] = 1;
}

bool GroupCompletion::ready() const {
  return in_group_order_ ? next_in_order_ < complete_.size() && complete_[next_in_order_] != 0
                         : !completed_.empty();
}

}  // namespace furlong::rollout
