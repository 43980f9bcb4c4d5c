// Collectives on a Group: thin wrappers over the c10d backend that stage non-contiguous tensors,
// turn every backend failure or timeout into a furlong::Error naming the group and operation,
// and make single-rank groups exact identities (no backend, no communication).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "dist/group_impl.h"

namespace furlong::dist {
namespace detail {

std::string cause_of(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  // c10 appends context lines; the first line carries the cause.
  auto newline = text.find('\n');
  if (newline != std::string::npos) text.resize(newline);
  // The caller continues the sentence.
  while (!text.empty() && (text.back() == '.' || text.back() == '!' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

void fail_collective(const OpContext& ctx, const std::string& cause) {
  if (ctx.state) ctx.state->failed = true;
  auto seconds = static_cast<double>(ctx.timeout.count()) / 1000.0;
  FURLONG_FAIL("dist: ", ctx.op, " on group '", ctx.group, "' (group rank ", ctx.group_rank, " of ",
               ctx.group_size, ") failed: ", cause,
               ". A peer rank may have died or stopped issuing collectives (group timeout ",
               seconds, " s); check the other ranks' output.");
}

}  // namespace detail

// ----- Work -----

Work::Work() = default;
Work::Work(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Work::Work(Work&&) noexcept = default;

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    Work old(std::move(*this));  // finishes (waits for) the work this one held
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Work::~Work() {
  if (!impl_ || impl_->done) return;
  try {
    wait();
  } catch (const std::exception& e) {
    LOG_WARN("an un-waited collective failed while its handle was dropped: ", e.what());
  }
}

void Work::wait() {
  if (!impl_ || impl_->done) return;
  impl_->done = true;
  try {
    if (impl_->timed_wait) {
      impl_->work->wait(impl_->ctx.timeout);
    } else {
      impl_->work->wait();
    }
  } catch (const std::exception& e) {
    detail::fail_collective(impl_->ctx, detail::cause_of(e));
  }
  if (impl_->finish) impl_->finish();
  impl_->keep_alive.clear();
}

// ----- Group -----

namespace {

// Rejects tensors the backend cannot take, with a message naming the group and operation.
void check_tensor(const Group::Impl& g, const char* op, const char* what, const at::Tensor& t) {
  FURLONG_CHECK(t.defined(), "dist: ", op, " on group '", g.name, "': ", what,
                " is an undefined tensor");
  FURLONG_CHECK(t.device().type() == g.device.type(), "dist: ", op, " on group '", g.name,
                "': ", what, " is on ", t.device(), " but this group (", backend_name(g.kind),
                ") works on ", g.device.type(), " tensors; move it there first");
}

detail::OpContext context(const Group::Impl& g, const char* op) {
  return detail::OpContext{op, g.name, g.rank, g.size, g.timeout, g.state};
}

// Issues one backend call and wraps the result; a synchronous failure raises like wait() would.
template <typename Launch>
Work issue(const Group::Impl& g, const char* op, Launch&& launch, std::function<void()> finish,
           std::vector<at::Tensor> keep_alive) {
  auto impl = std::make_unique<Work::Impl>();
  impl->ctx = context(g, op);
  impl->timed_wait = g.kind != Backend::kNccl;
  impl->finish = std::move(finish);
  impl->keep_alive = std::move(keep_alive);
  try {
    impl->work = launch();
  } catch (const std::exception& e) {
    detail::fail_collective(impl->ctx, detail::cause_of(e));
  }
  return Work(std::move(impl));
}

// Contiguous storage for `t` (itself when already contiguous) and the copy-back that a
// non-contiguous caller tensor needs once the collective has written the staging buffer.
std::pair<at::Tensor, std::function<void()>> staged(const at::Tensor& t) {
  if (t.is_contiguous()) return {t, nullptr};
  at::Tensor buffer = t.contiguous();
  return {buffer, [target = t, buffer]() mutable { target.copy_(buffer); }};
}

// Gloo has no native reduce-scatter: its _reduce_scatter_base clones the input, all-reduces the
// clone and copies this rank's chunk out. We do the same explicitly, always with SUM, so the result
// does not depend on how a torch version routes the reduce op (AVG has been mishandled there).
// It is as fast as _reduce_scatter_base (docs/build.md). NCCL uses its native reduce-scatter.
constexpr bool kGlooNativeReduceScatter = false;

}  // namespace

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Group::~Group() = default;

const std::string& Group::name() const {
  return impl_->name;
}
int Group::rank() const {
  return impl_->rank;
}
int Group::size() const {
  return impl_->size;
}
const std::vector<int>& Group::global_ranks() const {
  return impl_->global_ranks;
}

void Group::all_reduce_sum(at::Tensor& tensor) {
  all_reduce_sum_async(tensor).wait();
}

Work Group::all_reduce_sum_async(at::Tensor& tensor) {
  const Impl& g = *impl_;
  check_tensor(g, "all_reduce_sum", "the tensor", tensor);
  if (g.size == 1) return Work();
  stats_.bytes_all_reduce += tensor.nbytes();
  ++stats_.calls;
  auto [buffer, copy_back] = staged(tensor);
  return issue(g, "all_reduce_sum",
               [&] {
                 std::vector<at::Tensor> tensors{buffer};
                 c10d::AllreduceOptions opts;
                 opts.reduceOp = c10d::ReduceOp::SUM;
                 return g.backend->allreduce(tensors, opts);
               },
               copy_back, {buffer});
}

void Group::all_gather(at::Tensor& out, const at::Tensor& in) {
  all_gather_async(out, in).wait();
}

Work Group::all_gather_async(at::Tensor& out, const at::Tensor& in) {
  const Impl& g = *impl_;
  check_tensor(g, "all_gather", "the input", in);
  check_tensor(g, "all_gather", "the output", out);
  FURLONG_CHECK(out.is_contiguous(), "dist: all_gather on group '", g.name,
                "': the output must be contiguous");
  FURLONG_CHECK(out.scalar_type() == in.scalar_type(), "dist: all_gather on group '", g.name,
                "': output dtype ", out.scalar_type(), " differs from input dtype ",
                in.scalar_type());
  FURLONG_CHECK(out.numel() == in.numel() * g.size, "dist: all_gather on group '", g.name,
                "': the output has ", out.numel(), " elements but needs group size ", g.size, " x ",
                in.numel(), " input elements");
  at::Tensor flat_out = out.view({-1});
  at::Tensor flat_in = in.contiguous().view({-1});
  if (g.size == 1) {
    flat_out.copy_(flat_in);
    return Work();
  }
  stats_.bytes_all_gather += flat_out.nbytes();
  ++stats_.calls;
  return issue(g, "all_gather", [&] { return g.backend->_allgather_base(flat_out, flat_in); },
               nullptr, {flat_out, flat_in});
}

void Group::reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) {
  reduce_scatter_sum_async(out, in).wait();
}

Work Group::reduce_scatter_sum_async(at::Tensor& out, const at::Tensor& in) {
  return reduce_scatter_sum_impl(out, in, /*may_overwrite_input=*/false);
}

void Group::reduce_scatter_sum_overwriting_input(at::Tensor& out, at::Tensor& in) {
  reduce_scatter_sum_impl(out, in, /*may_overwrite_input=*/true).wait();
}

Work Group::reduce_scatter_sum_impl(at::Tensor& out, const at::Tensor& in,
                                    bool may_overwrite_input) {
  const Impl& g = *impl_;
  check_tensor(g, "reduce_scatter_sum", "the input", in);
  check_tensor(g, "reduce_scatter_sum", "the output", out);
  FURLONG_CHECK(out.is_contiguous(), "dist: reduce_scatter_sum on group '", g.name,
                "': the output must be contiguous");
  FURLONG_CHECK(out.scalar_type() == in.scalar_type(), "dist: reduce_scatter_sum on group '",
                g.name, "': output dtype ", out.scalar_type(), " differs from input dtype ",
                in.scalar_type());
  FURLONG_CHECK(in.numel() == out.numel() * g.size, "dist: reduce_scatter_sum on group '", g.name,
                "': the input has ", in.numel(), " elements but needs group size ", g.size, " x ",
                out.numel(), " output elements (pad the input to a multiple of ", g.size, ")");
  at::Tensor flat_out = out.view({-1});
  if (g.size == 1) {
    flat_out.copy_(in.reshape({-1}));
    return Work();
  }
  stats_.bytes_reduce_scatter += in.nbytes();
  ++stats_.calls;
  if (g.kind == Backend::kNccl || kGlooNativeReduceScatter) {
    at::Tensor flat_in = in.contiguous().view({-1});
    return issue(g, "reduce_scatter_sum",
                 [&] {
                   c10d::ReduceScatterOptions opts;
                   opts.reduceOp = c10d::ReduceOp::SUM;
                   return g.backend->_reduce_scatter_base(flat_out, flat_in, opts);
                 },
                 nullptr, {flat_out, flat_in});
  }
  // All-reduce the whole input (a private copy unless the caller gave it as scratch), then keep
  // this rank's chunk.
  at::Tensor buffer = in.contiguous();
  if (buffer.is_same(in) && !may_overwrite_input) buffer = in.clone();
  buffer = buffer.view({-1});
  const int64_t n = out.numel();
  const int64_t offset = n * g.rank;
  auto copy_chunk = [flat_out, buffer, n, offset]() mutable {
    flat_out.copy_(buffer.narrow(0, offset, n));
  };
  return issue(g, "reduce_scatter_sum",
               [&] {
                 std::vector<at::Tensor> tensors{buffer};
                 c10d::AllreduceOptions opts;
                 opts.reduceOp = c10d::ReduceOp::SUM;
                 return g.backend->allreduce(tensors, opts);
               },
               copy_chunk, {buffer});
}

void Group::broadcast(at::Tensor& tensor, int root) {
  const Impl& g = *impl_;
  check_tensor(g, "broadcast", "the tensor", tensor);
  FURLONG_CHECK(root >= 0 && root < g.size, "dist: broadcast on group '", g.name, "': root ", root,
                " is not a rank of this group (size ", g.size, ")");
  if (g.size == 1) return;
  stats_.bytes_broadcast += tensor.nbytes();
  ++stats_.calls;
  auto [buffer, copy_back] = staged(tensor);
  issue(g, "broadcast",
        [&] {
          std::vector<at::Tensor> tensors{buffer};
          c10d::BroadcastOptions opts;
          opts.rootRank = root;
          return g.backend->broadcast(tensors, opts);
        },
        copy_back, {buffer})
      .wait();
}

void Group::barrier() {
  const Impl& g = *impl_;
  if (g.size == 1) return;
  ++stats_.calls;
  issue(g, "barrier",
        [&] {
          c10d::BarrierOptions opts;
          opts.timeout = g.timeout;
          return g.backend->barrier(opts);
        },
        nullptr, {})
      .wait();
}

double Group::all_reduce_sum(double value) {
  auto t = at::tensor({value}, at::kDouble);
  all_reduce_sum(t);
  return t.item<double>();
}

int64_t Group::all_reduce_max(int64_t value) {
  auto mine = at::tensor({value}, at::kLong);
  auto all = at::empty({size()}, at::kLong);
  all_gather(all, mine);
  return all.max().item<int64_t>();
}

std::map<std::string, double> Group::all_reduce_sum(std::map<std::string, double> values) {
  if (values.empty()) return values;
  std::vector<double> flat;
  for (const auto& entry : values) flat.push_back(entry.second);
  auto totals = at::tensor(flat, at::kDouble);
  all_reduce_sum(totals);
  auto* total = totals.data_ptr<double>();
  for (auto& entry : values) entry.second = *total++;
  return values;
}

std::vector<std::string> Group::all_gather_strings(const std::string& value) {
  const Impl& g = *impl_;
  if (g.size == 1) return {value};
  // Lengths first, then every string padded to the longest.
  auto long_opts = at::TensorOptions().dtype(at::kLong).device(g.device);
  at::Tensor length = at::full({1}, static_cast<int64_t>(value.size()), long_opts);
  at::Tensor lengths = at::empty({g.size}, long_opts);
  all_gather(lengths, length);
  lengths = lengths.cpu();
  const int64_t* lens = lengths.data_ptr<int64_t>();
  int64_t longest = *std::max_element(lens, lens + g.size);
  std::vector<std::string> result(g.size);
  if (longest == 0) return result;
  at::Tensor mine = at::zeros({longest}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(mine.data_ptr<uint8_t>(), value.data(), value.size());
  mine = mine.to(g.device);
  at::Tensor all = at::empty({g.size * longest}, mine.options());
  all_gather(all, mine);
  all = all.cpu();
  const auto* bytes = reinterpret_cast<const char*>(all.data_ptr<uint8_t>());
  for (int r = 0; r < g.size; ++r) result[r].assign(bytes + r * longest, lens[r]);
  return result;
}

}  // namespace furlong::dist
