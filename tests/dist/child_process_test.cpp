// dist::ChildProcess: exit codes and signals are reported, the child is reaped once and its
// status remembered, a child that was reaped is never signalled (its pid may be someone else's
// by then), a child ignoring SIGTERM gets SIGKILL after the grace, the destructor cleans up,
// and the log file / pipes / environment reach the child.
#include "dist/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "common/test_util.h"
#include "core/error.h"

namespace furlong::dist {
namespace {

using Clock = std::chrono::steady_clock;

ChildOptions shell(const std::string& script) {
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

// Polls try_wait() for at most `limit`.
std::optional<ExitStatus> wait_for_exit(ChildProcess& child, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (auto status = child.try_wait()) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

// Running (or stopped), not a zombie and not gone.
bool process_exists(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string id, comm, state;
  if (!(stat >> id >> comm >> state)) return false;
  return state != "Z" && state != "X";
}

TEST(ChildProcess, ReportsTheExitCodeAndRemembersItAfterTheOneReap) {
  ChildProcess child(shell("exit 3"));
  auto status = wait_for_exit(child, std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->exit_code, 3);
  EXPECT_EQ(status->signal, 0);
  EXPECT_EQ(status->shell_code(), 3);
  EXPECT_EQ(status->describe(), "exit code 3");
  // Every later call answers from the remembered status (a second waitpid would fail).
  EXPECT_EQ(child.try_wait()->exit_code, 3);
  EXPECT_EQ(child.wait().exit_code, 3);
}

TEST(ChildProcess, AChildThatEndedAndWasReapedIsNeverSignalled) {
  ChildProcess child(shell("exit 0"));
  ASSERT_TRUE(wait_for_exit(child, std::chrono::seconds(10)).has_value());
  // The pid is free for reuse now: neither signal() nor terminate() (what the destructor
  // calls) may send anything to it.
  EXPECT_FALSE(child.signal(SIGTERM));
  ExitStatus status = child.terminate(std::chrono::milliseconds(100));
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(child.signals_sent(), 0);
}

TEST(ChildProcess, TerminateOfAChildThatEndedUnreapedReapsItWithoutASignal) {
  ChildProcess child(shell("exit 4"));
  // Let it end without reaping it: it stays a zombie until terminate() looks.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::string state;
  while (Clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(child.pid()) + "/stat");
    std::string pid, comm;
    stat >> pid >> comm >> state;
    if (state == "Z") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(state, "Z");
  EXPECT_EQ(child.terminate(std::chrono::milliseconds(100)).exit_code, 4);
  EXPECT_EQ(child.signals_sent(), 0);
}

TEST(ChildProcess, ReportsTheSignalThatKilledTheChild) {
  ChildProcess child(shell("kill -9 $$"));
  auto status = wait_for_exit(child, std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->signal, SIGKILL);
  EXPECT_EQ(status->shell_code(), 128 + SIGKILL);
  EXPECT_NE(status->describe().find("signal 9"), std::string::npos) << status->describe();
}

TEST(ChildProcess, TerminateStopsAChildThatHonoursSigtermWithinTheGrace) {
  ChildProcess child(shell("exec sleep 30"));
  const auto t0 = Clock::now();
  ExitStatus status = child.terminate(std::chrono::seconds(10));
  EXPECT_EQ(status.signal, SIGTERM);
  EXPECT_EQ(child.signals_sent(), 1) << "SIGTERM only";
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(ChildProcess, AChildIgnoringSigtermGetsSigkillAfterTheGrace) {
  ChildProcess child(shell("trap '' TERM; echo ready; while :; do sleep 0.05; done"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the trap is installed
  const auto t0 = Clock::now();
  ExitStatus status = child.terminate(std::chrono::milliseconds(500));
  const auto took = Clock::now() - t0;
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_EQ(child.signals_sent(), 2) << "SIGTERM, then SIGKILL";
  EXPECT_GE(took, std::chrono::milliseconds(450));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(ChildProcess, TheDestructorStopsAndReapsARunningChild) {
  pid_t pid = -1;
  {
    ChildOptions o = shell("exec sleep 30");
    o.kill_grace = std::chrono::milliseconds(2000);
    ChildProcess child(std::move(o));
    pid = child.pid();
    ASSERT_TRUE(process_exists(pid));
  }
  EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(pid)))
      << "stopped and reaped (no zombie left)";
}

TEST(ChildProcess, SignalsReachTheWholeGroupWithItsOwnProcessGroup) {
  ChildOptions o = shell("sleep 30 & echo $! ; wait");
  o.own_process_group = true;
  o.pipe_output = true;
  ChildProcess child(std::move(o));
  // Read the grandchild's pid from the pipe.
  std::string text;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (text.find('\n') == std::string::npos && Clock::now() < deadline) {
    char buf[64];
    ssize_t n = ::read(child.stdout_fd(), buf, sizeof(buf));
    if (n > 0) text.append(buf, static_cast<size_t>(n));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(text.find('\n'), std::string::npos);
  const pid_t grandchild = static_cast<pid_t>(std::stol(text));
  ASSERT_TRUE(process_exists(grandchild));
  child.terminate(std::chrono::seconds(5));
  // The grandchild got SIGTERM too; it is reparented and reaped by init, so poll briefly.
  const auto gone_by = Clock::now() + std::chrono::seconds(10);
  while (process_exists(grandchild) && Clock::now() < gone_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(process_exists(grandchild));
}

TEST(ChildProcess, WritesToTheLogFileWithTheGivenEnvironment) {
  const auto log =
      testing::binary_dir() / "testdata" / ("child_process." + std::to_string(::getpid()) + ".log");
  std::filesystem::create_directories(log.parent_path());
  std::filesystem::remove(log);
  ChildOptions o = shell("echo out=$FURLONG_CHILD_TEST; echo err >&2; exit 0");
  o.env = std::vector<std::string>{"FURLONG_CHILD_TEST=42", "PATH=/usr/bin:/bin"};
  o.log_file = log.string();
  ChildProcess child(std::move(o));
  ASSERT_TRUE(child.wait().ok());
  std::ifstream in(log);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str(), "out=42\nerr\n");
  std::filesystem::remove(log);
}

TEST(ChildProcess, ACommandThatCannotRunExits127AndSaysWhy) {
  ChildOptions o;
  o.argv = {"/nonexistent/program"};
  o.pipe_output = true;
  o.exec_failure_prefix = "test: ";
  ChildProcess child(std::move(o));
  EXPECT_EQ(child.wait().exit_code, 127);
  char buf[256] = {};
  ssize_t n = ::read(child.stderr_fd(), buf, sizeof(buf) - 1);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf).rfind("test: cannot execute '/nonexistent/program': ", 0), 0u) << buf;
}

TEST(ChildProcess, RejectsAnEmptyCommand) {
  EXPECT_THROW(ChildProcess(ChildOptions{}), Error);
}

}  // namespace
}  // namespace furlong::dist
