// The local launcher: one ChildProcess per rank, each in its own process group (so a stop
// reaches whatever the rank started), its stdout/stderr on pipes that a poll() loop turns into
// prefixed lines. Signals reach the loop through a self-pipe; children are reaped by pid only
// (ChildProcess), so other children of the calling process are left alone, and a rank that was
// reaped is never signalled again.
#include "dist/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/child_process.h"

extern char** environ;

namespace furlong::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_signal_pipe{-1};
std::atomic<bool> g_launch_active{false};

void on_signal(int signo) {
  int saved = errno;
  int fd = g_signal_pipe.load();
  if (fd >= 0) {
    auto byte = static_cast<unsigned char>(signo);
    ssize_t ignored = ::write(fd, &byte, 1);
    (void)ignored;
  }
  errno = saved;
}

// Routes SIGINT, SIGTERM and SIGCHLD into a non-blocking self-pipe for the lifetime of a launch
// and restores the previous handlers afterwards.
class SignalPipe {
 public:
  SignalPipe() {
    FURLONG_CHECK(::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) == 0,
                  "launch: cannot create a pipe: ", std::strerror(errno));
    g_signal_pipe = fds_[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalPipe() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    g_signal_pipe = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int read_fd() const { return fds_[0]; }
  // Signals received since the last call.
  std::vector<int> drain() {
    std::vector<int> out;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
    return out;
  }

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGCHLD};
  int fds_[2]{-1, -1};
  std::array<struct sigaction, 3> old_{};
};

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
}

bool replaced_variable(const std::string& entry) {
  static const std::vector<std::string> kOurs = {
      "RANK=",        "WORLD_SIZE=",  "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
      "MASTER_ADDR=", "MASTER_PORT=", "GROUP_RANK="};
  for (const auto& key : kOurs) {
    if (entry.rfind(key, 0) == 0) return true;
  }
  return entry.rfind("TORCHELASTIC_", 0) == 0;
}

// The environment shared by all ranks; per-rank variables are appended by rank_environment().
std::vector<std::string> common_environment(const LaunchOptions& o, int port) {
  std::vector<std::string> env;
  bool has_omp = false;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    if (replaced_variable(entry)) continue;
    if (entry.rfind("OMP_NUM_THREADS=", 0) == 0) has_omp = true;
    env.push_back(std::move(entry));
  }
  if (!has_omp) {
    int threads = std::max(1, available_cores() / o.nproc_per_node);
    env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  }
  env.push_back("WORLD_SIZE=" + std::to_string(o.num_nodes * o.nproc_per_node));
  env.push_back("GROUP_RANK=" + std::to_string(o.node_rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o.nproc_per_node));
  env.push_back("MASTER_ADDR=" + o.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  return env;
}

struct Rank {
  std::unique_ptr<ChildProcess> child;
  std::string partial[2];
  bool running = false;
  int fd(int stream) const {
    return child ? (stream == 0 ? child->stdout_fd() : child->stderr_fd()) : -1;
  }
};

// Starts one rank: `argv` with `env`, in its own process group (so a stop reaches whatever the
// rank started; background groups also keep it from reading the terminal, which would stop it
// with SIGTTIN), stdout/stderr on pipes, killed by the kernel if the launcher dies.
void spawn(Rank& r, std::vector<std::string> argv, std::vector<std::string> env,
           std::chrono::milliseconds kill_grace) {
  ChildOptions o;
  o.argv = std::move(argv);
  o.env = std::move(env);
  o.pipe_output = true;
  o.stdin_from_dev_null = true;
  o.own_process_group = true;
  o.die_with_parent = true;
  o.kill_grace = kill_grace;
  o.exec_failure_prefix = "launch: ";
  r.child = std::make_unique<ChildProcess>(std::move(o));
  r.running = true;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

class Launch {
 public:
  explicit Launch(const LaunchOptions& o) : o_(o), ranks_(o.nproc_per_node) {}
  ~Launch() { kill_survivors(); }

  int run();

 private:
  void emit(const std::string& line, bool is_stderr);
  void note(const std::string& text) { emit("[launch] " + text, true); }
  int global_rank(int local) const { return o_.node_rank * o_.nproc_per_node + local; }
  void start_all();
  void pump(int timeout_ms);
  void read_stream(int rank, int stream);
  void reap();
  void handle_signals();
  void stop_all(int signo);
  void kill_survivors();
  bool any_running() const;
  bool any_open() const;

  const LaunchOptions& o_;
  std::vector<Rank> ranks_;
  SignalPipe signals_;
  std::optional<int> failure_;  // exit status of the first rank that failed
  int forwarded_ = 0;           // signal forwarded from the launcher's caller, if any
  std::optional<Clock::time_point> kill_at_;
  bool killed_ = false;
};

void Launch::emit(const std::string& line, bool is_stderr) {
  if (o_.output) {
    o_.output(line, is_stderr);
  } else {
    write_all(is_stderr ? 2 : 1, line + "\n");
  }
}

void Launch::start_all() {
  int port = o_.master_port != 0 ? o_.master_port : pick_free_port(o_.master_addr);
  auto common = common_environment(o_, port);
  for (int r = 0; r < o_.nproc_per_node; ++r) {
    auto env = common;
    env.push_back("RANK=" + std::to_string(o_.node_rank * o_.nproc_per_node + r));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    spawn(ranks_[r], o_.command, std::move(env), o_.kill_grace);
  }
}

// Reads what is available; emits every complete line, and the remainder at end of stream.
void Launch::read_stream(int rank, int stream) {
  Rank& r = ranks_[rank];
  char buf[65536];
  while (true) {
    ssize_t n = ::read(r.fd(stream), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    std::string& pending = r.partial[stream];
    if (n > 0) {
      pending.append(buf, static_cast<size_t>(n));
      size_t start = 0, newline;
      while ((newline = pending.find('\n', start)) != std::string::npos) {
        emit("[rank " + std::to_string(global_rank(rank)) + "] " +
                 pending.substr(start, newline - start),
             stream == 1);
        start = newline + 1;
      }
      pending.erase(0, start);
      continue;
    }
    if (!pending.empty()) {
      emit("[rank " + std::to_string(global_rank(rank)) + "] " + pending, stream == 1);
    }
    pending.clear();
    r.child->close_output(stream);
    return;
  }
}

void Launch::pump(int timeout_ms) {
  std::vector<pollfd> fds{{signals_.read_fd(), POLLIN, 0}};
  std::vector<std::pair<int, int>> owners{{-1, -1}};
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    for (int s = 0; s < 2; ++s) {
      if (ranks_[r].fd(s) < 0) continue;
      fds.push_back({ranks_[r].fd(s), POLLIN, 0});
      owners.emplace_back(r, s);
    }
  }
  int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (ready <= 0) return;
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) read_stream(owners[i].first, owners[i].second);
  }
  if (fds[0].revents != 0) handle_signals();
}

void Launch::reap() {
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    Rank& rank = ranks_[r];
    if (!rank.running) continue;
    auto status = rank.child->try_wait();
    if (!status) continue;
    rank.running = false;
    int code = status->shell_code();
    if (code == 0 || failure_) continue;
    failure_ = code;
    std::string how = status->signal != 0 ? "was killed by signal " + std::to_string(status->signal)
                                          : "exited with status " + std::to_string(code);
    note("rank " + std::to_string(global_rank(r)) + " " + how + "; stopping the other ranks");
    stop_all(SIGTERM);
  }
}

void Launch::handle_signals() {
  for (int signo : signals_.drain()) {
    if (signo != SIGINT && signo != SIGTERM) continue;  // SIGCHLD only wakes the loop
    if (forwarded_ == 0) forwarded_ = signo;
    note(std::string("received ") + (signo == SIGINT ? "SIGINT" : "SIGTERM") +
         "; forwarding it to the ranks");
    stop_all(signo);
  }
}

// Sends `signo` to every running rank's process group and arms the SIGKILL deadline.
void Launch::stop_all(int signo) {
  for (const Rank& r : ranks_) {
    if (r.running) r.child->signal(signo);
  }
  if (!kill_at_) kill_at_ = Clock::now() + o_.kill_grace;
}

void Launch::kill_survivors() {
  for (Rank& r : ranks_) {
    if (r.running) {
      r.child->signal(SIGKILL);
      r.child->wait();
      r.running = false;
    }
    if (r.child) {
      r.child->close_output(0);
      r.child->close_output(1);
    }
  }
}

bool Launch::any_running() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
}
bool Launch::any_open() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const Rank& r) { return r.fd(0) >= 0 || r.fd(1) >= 0; });
}

int Launch::run() {
  start_all();
  // Output that a rank's own children keep open is read for at most this long after the last
  // rank exited.
  std::optional<Clock::time_point> drain_until;
  while (true) {
    reap();
    auto now = Clock::now();
    if (kill_at_ && now >= *kill_at_ && !killed_ && any_running()) {
      note("ranks still running after the grace period; sending SIGKILL");
      for (const Rank& r : ranks_) {
        if (r.running) r.child->signal(SIGKILL);
      }
      killed_ = true;
    }
    if (!any_running()) {
      if (!any_open()) break;
      if (!drain_until) drain_until = now + std::chrono::seconds(1);
      if (now >= *drain_until) break;
    }
    int timeout_ms = 100;
    if (kill_at_ && !killed_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - now);
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 100));
    }
    pump(timeout_ms);
  }
  kill_survivors();
  if (failure_) return *failure_;
  return forwarded_ != 0 ? 128 + forwarded_ : 0;
}

}  // namespace

int pick_free_port(const std::string& addr) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FURLONG_CHECK(fd >= 0, "launch: cannot open a socket to pick a port: ", std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) sa.sin_addr.s_addr = INADDR_ANY;
  socklen_t len = sizeof(sa);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  int err = errno;
  ::close(fd);
  FURLONG_CHECK(ok, "launch: cannot pick a free port on ", addr, ": ", std::strerror(err),
                "; pass --master-port");
  return ntohs(sa.sin_port);
}

int launch(const LaunchOptions& options) {
  FURLONG_CHECK(options.nproc_per_node >= 1, "launch: --nproc-per-node must be at least 1 (got ",
                options.nproc_per_node, ")");
  FURLONG_CHECK(!options.command.empty() && !options.command[0].empty(),
                "launch: no command to run; give the program and its arguments");
  FURLONG_CHECK(
      options.num_nodes >= 1 && options.node_rank >= 0 && options.node_rank < options.num_nodes,
      "launch: node rank ", options.node_rank, " is not in 0..", options.num_nodes - 1);
  FURLONG_CHECK(options.num_nodes == 1 || options.master_port != 0, "launch: a launch on ",
                options.num_nodes,
                " nodes needs a master port that every node knows (0 picks one on this node only)");
  FURLONG_CHECK(options.master_port >= 0 && options.master_port <= 65535, "launch: --master-port ",
                options.master_port, " is not a TCP port (0..65535; 0 picks a free one)");
  FURLONG_CHECK(!g_launch_active.exchange(true),
                "launch: another launch is already running in this process");
  struct Release {
    ~Release() { g_launch_active = false; }
  } release;
  Launch job(options);
  return job.run();
}

}  // namespace furlong::dist
