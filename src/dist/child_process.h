// ChildProcess: one fork/exec'd child, owned RAII-style. The one place furlong starts and stops
// processes (the local launcher's ranks, the trainer's engine servers).
//
// Invariants:
// - The child is reaped exactly once (by try_wait(), wait() or terminate()); its exit status is
//   remembered and returned by every later call.
// - A child that has been reaped is never signalled again: after the reap its pid may belong to
//   an unrelated process. (Before the reap the pid is a zombie at worst and cannot be reused.)
// - The destructor terminates a child that is still running (SIGTERM, the grace period, then
//   SIGKILL) and reaps it; it does nothing to a child that was already reaped.
// - All methods may be called from several threads at once (one mutex orders reap and signals).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace furlong::dist {

// How a child ended.
struct ExitStatus {
  int exit_code = 0;  // when it exited (signal == 0)
  int signal = 0;     // the signal that killed it, 0 when it exited
  bool ok() const { return signal == 0 && exit_code == 0; }
  // The shell's convention: the exit code, or 128 + the signal.
  int shell_code() const { return signal != 0 ? 128 + signal : exit_code; }
  // "exit code 3" / "signal 9 (Killed)".
  std::string describe() const;
};

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is searched in PATH unless it holds a '/'
  // The child's whole environment ("KEY=value"); nullopt inherits this process's.
  std::optional<std::vector<std::string>> env;
  // Non-empty: the child's stdout and stderr are appended to this file (created if needed).
  std::string log_file;
  // The child's stdout and stderr go to pipes read through stdout_fd() / stderr_fd() (not
  // together with log_file). Otherwise (and without log_file) they are this process's.
  bool pipe_output = false;
  bool stdin_from_dev_null = false;
  // The child leads a new process group and signals reach the whole group (what it started too).
  bool own_process_group = false;
  // The kernel SIGKILLs the child when this thread's process dies (PR_SET_PDEATHSIG).
  bool die_with_parent = false;
  // terminate()'s wait between SIGTERM and SIGKILL when the destructor stops the child.
  std::chrono::milliseconds kill_grace{5000};
  // Prefixes the line the child writes to its stderr when exec fails ("cannot execute ...").
  std::string exec_failure_prefix;
};

class ChildProcess {
 public:
  // Forks and execs; furlong::Error when the fork (or a pipe, or the log file) fails. A command
  // that cannot be executed is reported by the child: a line on its stderr and exit code 127.
  explicit ChildProcess(ChildOptions options);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::vector<std::string>& argv() const { return options_.argv; }

  // The status once the child has ended (reaping it the first time), nullopt while it runs.
  std::optional<ExitStatus> try_wait();
  // Blocks until the child ends.
  ExitStatus wait();
  // Sends `signo` (to the group with own_process_group) unless the child was already reaped;
  // returns whether a signal was sent.
  bool signal(int signo);
  // SIGTERM, up to `grace` for the child to end, then SIGKILL; returns how it ended. Sends
  // nothing to a child that was already reaped.
  ExitStatus terminate(std::chrono::milliseconds grace);
  ExitStatus terminate() { return terminate(options_.kill_grace); }

  // Read ends of the output pipes (pipe_output), non-blocking; -1 otherwise or once closed.
  int stdout_fd() const { return out_fd_[0]; }
  int stderr_fd() const { return out_fd_[1]; }
  void close_output(int stream);  // 0 = stdout, 1 = stderr

  // How many signals this object has sent (for tests of the never-signal-after-reap rule).
  int signals_sent() const;

 private:
  std::optional<ExitStatus> reap_locked(bool block);
  bool signal_locked(int signo);

  ChildOptions options_;
  pid_t pid_ = -1;
  int out_fd_[2] = {-1, -1};
  mutable std::mutex mu_;
  std::optional<ExitStatus> status_;  // set by the one reap
  int signals_sent_ = 0;
};

}  // namespace furlong::dist
