// ChildProcess (see child_process.h). Everything the child touches after fork() is prepared
// before it (argv/env arrays, the log file, pipes), so that the child only makes
// async-signal-safe calls before exec: the parent may have other threads.
#include "dist/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace furlong::dist {
namespace {

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

ExitStatus decode(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  } else {
    s.exit_code = 1;
  }
  return s;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The file descriptors the child gets as 0, 1 and 2 (-1 = keep this process's).
struct ChildFds {
  int in = -1;
  int out = -1;
  int err = -1;
  int pipe_read[2] = {-1, -1};  // the parent's ends (pipe_output)
  std::vector<int> to_close;    // everything to close in the parent after the fork
};

ChildFds open_child_fds(const ChildOptions& o) {
  ChildFds fds;
  auto fail = [&](const std::string& what) {
    int err = errno;
    for (int& fd : fds.to_close) close_fd(fd);
    for (int& fd : fds.pipe_read) close_fd(fd);
    FURLONG_FAIL("cannot start '", o.argv[0], "': ", what, " (", std::strerror(err), ")");
  };
  if (o.stdin_from_dev_null) {
    fds.in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fds.in < 0) fail("cannot open /dev/null");
    fds.to_close.push_back(fds.in);
  }
  if (!o.log_file.empty()) {
    fds.out = ::open(o.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fds.out < 0) fail("cannot open the log file " + o.log_file);
    fds.err = fds.out;
    fds.to_close.push_back(fds.out);
  } else if (o.pipe_output) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) fail("cannot create a pipe");
    fds.pipe_read[0] = out[0];
    fds.out = out[1];
    fds.to_close.push_back(out[1]);
    if (::pipe2(err, O_CLOEXEC) != 0) fail("cannot create a pipe");
    fds.pipe_read[1] = err[0];
    fds.err = err[1];
    fds.to_close.push_back(err[1]);
  }
  return fds;
}

// In the child: only async-signal-safe calls from here to exec.
[[noreturn]] void exec_child(const ChildOptions& o, const ChildFds& fds, pid_t parent, char** argv,
                             char** envp, const std::string& failure) {
  if (o.own_process_group) ::setpgid(0, 0);
  if (o.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
  }
  for (int signo : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) ::signal(signo, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (fds.in >= 0) ::dup2(fds.in, 0);
  if (fds.out >= 0) ::dup2(fds.out, 1);
  if (fds.err >= 0) ::dup2(fds.err, 2);
  ::execvpe(argv[0], argv, envp);
  const char* why = std::strerror(errno);
  ssize_t ignored = ::write(2, failure.data(), failure.size());
  ignored = ::write(2, why, std::strlen(why));
  ignored = ::write(2, "\n", 1);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

std::string ExitStatus::describe() const {
  if (signal == 0) return "exit code " + std::to_string(exit_code);
  const char* name = ::strsignal(signal);
  return "signal " + std::to_string(signal) + (name ? " (" + std::string(name) + ")" : "");
}

ChildProcess::ChildProcess(ChildOptions options) : options_(std::move(options)) {
  FURLONG_CHECK(!options_.argv.empty() && !options_.argv[0].empty(),
                "ChildProcess: no command to run (argv is empty)");
  FURLONG_CHECK(options_.log_file.empty() || !options_.pipe_output,
                "ChildProcess: log_file and pipe_output cannot both be set for '", options_.argv[0],
                "'");
  std::vector<std::string> argv = options_.argv;
  std::vector<std::string> env;
  if (options_.env) {
    env = *options_.env;
  } else {
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  }
  auto c_argv = c_strings(argv);
  auto c_env = c_strings(env);
  const std::string failure = options_.exec_failure_prefix + "cannot execute '" + argv[0] + "': ";
  ChildFds fds = open_child_fds(options_);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) exec_child(options_, fds, parent, c_argv.data(), c_env.data(), failure);
  int fork_errno = errno;
  for (int& fd : fds.to_close) close_fd(fd);
  if (pid_ < 0) {
    for (int& fd : fds.pipe_read) close_fd(fd);
    FURLONG_FAIL("cannot start '", argv[0], "': fork failed (", std::strerror(fork_errno), ")");
  }
  // Also from the parent, so that a signal sent right away finds the group.
  if (options_.own_process_group) ::setpgid(pid_, pid_);
  for (int s = 0; s < 2; ++s) {
    out_fd_[s] = fds.pipe_read[s];
    if (out_fd_[s] >= 0) ::fcntl(out_fd_[s], F_SETFL, ::fcntl(out_fd_[s], F_GETFL) | O_NONBLOCK);
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) terminate();
  close_output(0);
  close_output(1);
}

std::optional<ExitStatus> ChildProcess::reap_locked(bool block) {
  if (status_) return status_;
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got == pid_) {
    status_ = decode(status);
  } else if (got < 0 && errno == ECHILD) {
    // Someone else reaped it (a SIG_IGN'd SIGCHLD or a stray waitpid(-1)): never signal it again.
    status_ = ExitStatus{.exit_code = 255, .signal = 0};
  }
  return status_;
}

bool ChildProcess::signal_locked(int signo) {
  if (status_ || pid_ <= 0) return false;
  ::kill(options_.own_process_group ? -pid_ : pid_, signo);
  ++signals_sent_;
  return true;
}

std::optional<ExitStatus> ChildProcess::try_wait() {
  std::lock_guard<std::mutex> lock(mu_);
  return reap_locked(false);
}

ExitStatus ChildProcess::wait() {
  std::lock_guard<std::mutex> lock(mu_);
  return *reap_locked(true);
}

bool ChildProcess::signal(int signo) {
  std::lock_guard<std::mutex> lock(mu_);
  reap_locked(false);  // a child that has just ended is not signalled
  return signal_locked(signo);
}

ExitStatus ChildProcess::terminate(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reap_locked(false)) return *status_;
    signal_locked(SIGTERM);
  }
  // The lock is released between polls, so that other threads' try_wait() is not held up.
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto status = try_wait()) return *status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (reap_locked(false)) return *status_;
  signal_locked(SIGKILL);
  return *reap_locked(true);
}

void ChildProcess::close_output(int stream) {
  close_fd(out_fd_[stream]);
}

int ChildProcess::signals_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return signals_sent_;
}

}  // namespace furlong::dist
