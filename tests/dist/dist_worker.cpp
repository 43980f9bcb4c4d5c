// One rank of the dist tests, started by dist_tests through dist::launch. It joins the process
// groups from the environment, runs the collectives of one mode and checks the results itself,
// printing machine-checkable lines on stdout:
//   OK <check>            a check passed
//   BAD <check>: <why>    a check failed
//   MESH ...              the mesh layout this rank sees
//   ERROR: <message>      a furlong::Error ended the rank (exit status 1)
//   DONE                  the mode finished
//
// Modes:
//   collectives                every collective, fp32 / bf16 / int64, sync and async
//   mesh                       meshes with dp_replicate 1, 2, 4 (those dividing the world size)
//   die <timeout_ms>           rank 1 exits (status 3) before an all-reduce; the others must fail
//                              with a clear error (they ignore SIGTERM, so they exit on their own)
//   stall <timeout_ms>         rank 1 stays alive but never joins the all-reduce; rank 0 must time
//                              out
//   heartbeat <timeout_ms> [r] heartbeat on (that timeout, collectives 120 s); rank r (default:
//                              the last) stops itself (SIGSTOP) before an all-reduce, the others
//                              must end within the heartbeat timeout naming it
//   heartbeat_clean <ms>       heartbeat on; ranks finish at different times: nobody is reported
#include <ATen/ATen.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/mesh.h"
#include "dist/process_group.h"

namespace furlong::dist {
namespace {

using std::chrono::milliseconds;

int g_bad = 0;

void check(bool ok, const std::string& name, const std::string& why = "") {
  if (ok) {
    std::cout << "OK " << name << std::endl;
  } else {
    ++g_bad;
    std::cout << "BAD " << name << ": " << why << std::endl;
  }
}

std::string str(const at::Tensor& t) {
  std::ostringstream os;
  os << t.to(at::kDouble).reshape({-1});
  std::string s = os.str();
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

void check_equal(const at::Tensor& got, const at::Tensor& want, const std::string& name) {
  bool ok = got.sizes() == want.sizes() && at::equal(got.to(at::kDouble), want.to(at::kDouble));
  check(ok, name, "got " + str(got) + " want " + str(want));
}

std::unique_ptr<ProcessGroups> init(milliseconds timeout) {
  InitOptions options;
  options.backend = Backend::kGloo;
  options.timeout = timeout;
  options.rendezvous_timeout = std::chrono::seconds(60);  // start-up is slow on a busy host
  return ProcessGroups::init(rendezvous_from_env(), options);
}

at::Tensor iota(int64_t n, at::ScalarType dtype) {
  return at::arange(n, at::TensorOptions().dtype(at::kLong)).to(dtype);
}

void all_reduce_checks(Group& w, at::ScalarType dtype, const std::string& tag) {
  const int W = w.size(), r = w.rank();
  const int64_t tri = W * (W + 1) / 2;  // sum over ranks of (rank + 1)
  at::Tensor want = (iota(5, at::kLong) + 1) * tri;
  at::Tensor t = ((iota(5, at::kLong) + 1) * (r + 1)).to(dtype);
  w.all_reduce_sum(t);
  check_equal(t, want, "all_reduce_sum.sync." + tag);

  at::Tensor a = ((iota(5, at::kLong) + 1) * (r + 1)).to(dtype);
  Work work = w.all_reduce_sum_async(a);
  work.wait();
  work.wait();  // a second wait is a no-op
  check_equal(a, want, "all_reduce_sum.async." + tag);

  // A transposed (non-contiguous) tensor is reduced in place through a staging copy.
  at::Tensor base = ((iota(6, at::kLong) + 1) * (r + 1)).to(dtype).view({2, 3});
  at::Tensor nc = base.t();
  w.all_reduce_sum(nc);
  check_equal(base, ((iota(6, at::kLong) + 1) * tri).view({2, 3}),
              "all_reduce_sum.noncontiguous." + tag);
}

void gather_scatter_checks(Group& w, at::ScalarType dtype, const std::string& tag) {
  const int W = w.size(), r = w.rank();
  const int64_t tri = W * (W + 1) / 2;
  // all_gather: rank q contributes q*10 + [0, 1, 2].
  at::Tensor want = (iota(W, at::kLong).unsqueeze(1) * 10 + iota(3, at::kLong)).reshape({-1});
  at::Tensor in = (iota(3, at::kLong) + 10 * r).to(dtype);
  at::Tensor out = at::empty({W * 3}, in.options());
  w.all_gather(out, in);
  check_equal(out, want, "all_gather.sync." + tag);
  at::Tensor out2 = at::zeros({W * 3}, in.options());
  w.all_gather_async(out2, in).wait();
  check_equal(out2, want, "all_gather.async." + tag);
  at::Tensor out3 = at::zeros({W, 3}, in.options());
  w.all_gather(out3, in.view({1, 3}));
  check_equal(out3, want.view({W, 3}), "all_gather.2d." + tag);

  // reduce_scatter_sum: rank q contributes (q + 1) * (1 .. 2W); rank r keeps elements 2r, 2r+1.
  at::Tensor rs_in = ((iota(2 * W, at::kLong) + 1) * (r + 1)).to(dtype);
  at::Tensor rs_want = (iota(2, at::kLong) + 2 * r + 1) * tri;
  at::Tensor rs_out = at::empty({2}, rs_in.options());
  w.reduce_scatter_sum(rs_out, rs_in);
  check_equal(rs_out, rs_want, "reduce_scatter_sum.sync." + tag);
  at::Tensor rs_out2 = at::zeros({2}, rs_in.options());
  w.reduce_scatter_sum_async(rs_out2, rs_in).wait();
  check_equal(rs_out2, rs_want, "reduce_scatter_sum.async." + tag);
  check_equal(rs_in, ((iota(2 * W, at::kLong) + 1) * (r + 1)), "reduce_scatter_sum.input." + tag);
}

void broadcast_checks(Group& w, at::ScalarType dtype, const std::string& tag) {
  const int W = w.size(), r = w.rank();
  at::Tensor t = (iota(4, at::kLong) + 7 * r).to(dtype);
  w.broadcast(t, W - 1);
  check_equal(t, iota(4, at::kLong) + 7 * (W - 1), "broadcast.rootlast." + tag);
  at::Tensor u = (iota(4, at::kLong) + 7 * r).to(dtype);
  w.broadcast(u, 0);
  check_equal(u, iota(4, at::kLong), "broadcast.root0." + tag);
}

// Several collectives in flight at once, waited in reverse order.
void inflight_checks(Group& w) {
  const int W = w.size(), r = w.rank();
  at::Tensor a = at::full({8}, r + 1.0);
  at::Tensor g_in = at::full({2}, static_cast<double>(r)), g_out = at::empty({2 * W});
  at::Tensor s_in = at::ones({2 * W}), s_out = at::empty({2});
  Work wa = w.all_reduce_sum_async(a);
  Work wg = w.all_gather_async(g_out, g_in);
  Work ws = w.reduce_scatter_sum_async(s_out, s_in);
  ws.wait();
  wg.wait();
  wa.wait();
  check_equal(a, at::full({8}, W * (W + 1) / 2.0), "inflight.all_reduce");
  check_equal(g_out, iota(W, at::kFloat).repeat_interleave(2), "inflight.all_gather");
  check_equal(s_out, at::full({2}, static_cast<double>(W)), "inflight.reduce_scatter");
}

void strings_checks(Group& w) {
  const int W = w.size(), r = w.rank();
  auto got = w.all_gather_strings("rank" + std::to_string(r) + std::string(r, 'x'));
  bool ok = static_cast<int>(got.size()) == W;
  for (int q = 0; ok && q < W; ++q) ok = got[q] == "rank" + std::to_string(q) + std::string(q, 'x');
  check(ok, "all_gather_strings", "unexpected strings");
  auto empty = w.all_gather_strings("");
  check(empty == std::vector<std::string>(W), "all_gather_strings.empty", "expected empties");
}

int collectives() {
  auto pg = init(std::chrono::seconds(30));
  Group& w = pg->world();
  const std::vector<std::pair<at::ScalarType, std::string>> dtypes = {
      {at::kFloat, "float32"}, {at::kBFloat16, "bfloat16"}, {at::kLong, "int64"}};
  for (const auto& [dtype, tag] : dtypes) {
    all_reduce_checks(w, dtype, tag);
    gather_scatter_checks(w, dtype, tag);
    broadcast_checks(w, dtype, tag);
  }
  inflight_checks(w);
  strings_checks(w);
  w.barrier();
  check(true, "barrier");
  return 0;
}

std::string list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// Each rank contributes 2^rank, so a sum identifies exactly which ranks took part.
int64_t reduce_bits(Group& g, int rank) {
  at::Tensor t = at::full({1}, int64_t{1} << rank, at::TensorOptions().dtype(at::kLong));
  g.all_reduce_sum(t);
  return t.item<int64_t>();
}

int64_t bits_of(const std::vector<int>& ranks) {
  int64_t sum = 0;
  for (int q : ranks) sum += int64_t{1} << q;
  return sum;
}

void mesh_checks(ProcessGroups& pg, int R) {
  const int W = pg.world().size(), r = pg.world().rank();
  auto mesh = Mesh::build(pg, R);
  const int S = W / R;
  std::vector<int> shard, replicate;
  for (int k = 0; k < S; ++k) shard.push_back((r / S) * S + k);
  for (int k = 0; k < R; ++k) replicate.push_back(k * S + r % S);
  std::cout << "MESH R=" << R << " S=" << mesh->shard_size() << " rep=" << mesh->replicate_index()
            << " shard=" << mesh->shard_index()
            << " dp_shard=" << list(mesh->dp_shard().global_ranks())
            << " dp_replicate=" << list(mesh->dp_replicate().global_ranks()) << std::endl;
  const std::string p = "mesh.R" + std::to_string(R) + ".";
  check(mesh->dp_shard().global_ranks() == shard && mesh->dp_shard().rank() == r % S,
        p + "dp_shard.members", list(mesh->dp_shard().global_ranks()));
  check(mesh->dp_replicate().global_ranks() == replicate && mesh->dp_replicate().rank() == r / S,
        p + "dp_replicate.members", list(mesh->dp_replicate().global_ranks()));
  check(mesh->cp().global_ranks() == std::vector<int>{r} && mesh->tp().size() == 1,
        p + "cp_tp.single", "cp/tp are not single-rank");
  int64_t got = reduce_bits(mesh->dp_shard(), r);
  check(got == bits_of(shard), p + "dp_shard.sum", std::to_string(got));
  got = reduce_bits(mesh->dp_replicate(), r);
  check(got == bits_of(replicate), p + "dp_replicate.sum", std::to_string(got));
  got = reduce_bits(mesh->cp(), r);
  check(got == (int64_t{1} << r), p + "cp.sum", std::to_string(got));
  got = reduce_bits(mesh->tp(), r);
  check(got == (int64_t{1} << r), p + "tp.sum", std::to_string(got));
  got = reduce_bits(mesh->dp(), r);
  check(got == (int64_t{1} << W) - 1, p + "dp.sum", std::to_string(got));
  // The shard group's all_gather and reduce_scatter see only the shard members.
  at::Tensor out = at::empty({S}, at::TensorOptions().dtype(at::kLong));
  mesh->dp_shard().all_gather(out, at::full({1}, int64_t{r}, out.options()));
  check_equal(out, at::tensor(std::vector<int64_t>(shard.begin(), shard.end())),
              p + "dp_shard.all_gather");
}

int mesh_mode() {
  auto pg = init(std::chrono::seconds(30));
  for (int R : {1, 2, 4}) {
    if (pg->world().size() % R == 0) mesh_checks(*pg, R);
  }
  return 0;
}

// Rank 1 dies before the all-reduce; the others report the failure (or time out) and exit.
int die_mode(milliseconds timeout) {
  ::signal(SIGTERM, SIG_IGN);  // show that survivors end by themselves, not by the launcher
  auto pg = init(timeout);
  pg->world().barrier();
  if (pg->world().rank() == 1) {
    std::this_thread::sleep_for(milliseconds(200));  // let every rank leave the barrier
    ::_exit(3);
  }
  at::Tensor t = at::ones({1024});
  auto start = std::chrono::steady_clock::now();
  try {
    pg->world().all_reduce_sum(t);
  } catch (const Error&) {
    auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    std::cout << "FAILED_AFTER_MS " << ms.count() << std::endl;
    throw;
  }
  check(false, "die.all_reduce", "completed although rank 1 died");
  return 1;
}

// Rank 1 is alive but never joins; rank 0's all-reduce must end within the timeout.
int stall_mode(milliseconds timeout) {
  auto pg = init(timeout);
  pg->world().barrier();
  if (pg->world().rank() == 1) {
    std::this_thread::sleep_for(timeout * 10);
    return 0;
  }
  at::Tensor t = at::ones({16});
  pg->world().all_reduce_sum(t);
  check(false, "stall.all_reduce", "completed although rank 1 never joined");
  return 1;
}

std::unique_ptr<ProcessGroups> init_with_heartbeat(milliseconds heartbeat_timeout) {
  InitOptions options;
  options.backend = Backend::kGloo;
  options.timeout = std::chrono::seconds(120);
  options.rendezvous_timeout = std::chrono::seconds(60);
  options.heartbeat_timeout = heartbeat_timeout;
  return ProcessGroups::init(rendezvous_from_env(), options);
}

// The last rank stops itself; the others block in an all-reduce far shorter than its timeout
// would end, so only the heartbeat can end them in time.
int heartbeat_mode(milliseconds heartbeat_timeout, std::optional<int> stopped_rank) {
  auto pg = init_with_heartbeat(heartbeat_timeout);
  pg->world().barrier();
  std::cout << "STARTED" << std::endl;
  if (pg->world().rank() == stopped_rank.value_or(pg->world().size() - 1)) ::raise(SIGSTOP);
  at::Tensor t = at::ones({16});
  pg->world().all_reduce_sum(t);
  check(false, "heartbeat.all_reduce", "completed although a rank was stopped");
  return 1;
}

// Rank r sleeps r x the heartbeat timeout after the last collective before leaving: ranks that
// left cleanly must not be taken for silent ones.
int heartbeat_clean_mode(milliseconds heartbeat_timeout) {
  auto pg = init_with_heartbeat(heartbeat_timeout);
  pg->world().barrier();
  std::this_thread::sleep_for(heartbeat_timeout * 2 *
                              (pg->world().size() - 1 - pg->world().rank()));
  check(true, "heartbeat_clean", "");
  return 0;
}

int run(const std::vector<std::string>& args) {
  FURLONG_CHECK(!args.empty(), "usage: dist_worker collectives|mesh|die <ms>|stall <ms>");
  const std::string& mode = args[0];
  auto ms_arg = [&] { return milliseconds(args.size() > 1 ? std::stoi(args[1]) : 3000); };
  int rc;
  if (mode == "collectives") {
    rc = collectives();
  } else if (mode == "mesh") {
    rc = mesh_mode();
  } else if (mode == "die") {
    rc = die_mode(ms_arg());
  } else if (mode == "stall") {
    rc = stall_mode(ms_arg());
  } else if (mode == "heartbeat") {
    rc = heartbeat_mode(ms_arg(),
                        args.size() > 2 ? std::optional<int>(std::stoi(args[2])) : std::nullopt);
  } else if (mode == "heartbeat_clean") {
    rc = heartbeat_clean_mode(ms_arg());
  } else {
    FURLONG_FAIL("dist_worker: unknown mode '", mode, "'");
  }
  std::cout << "DONE" << std::endl;
  return rc != 0 || g_bad != 0 ? 1 : 0;
}

}  // namespace
}  // namespace furlong::dist

int main(int argc, char** argv) {
  try {
    return furlong::dist::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const furlong::Error& e) {
    std::cout << "ERROR: " << e.what() << std::endl;
    return 1;
  }
}
