#include "test_util.h"

#include "core/error.h"

#include <ATen/ATen.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace furlong::testing {

std::filesystem::path source_dir() {
  const char* env = std::getenv("FURLONG_SOURCE_DIR");
  return env ? env : FURLONG_SOURCE_DIR;
}

std::filesystem::path binary_dir() {
  return FURLONG_BINARY_DIR;
}

std::filesystem::path python() {
  const char* env = std::getenv("FURLONG_PYTHON");
  return env ? env : FURLONG_DEFAULT_PYTHON;
}

std::filesystem::path scratch_dir() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "global";
  for (auto& c : name)
    if (c == '/') c = '_';
  auto dir = binary_dir() / "testdata" /
             (name + "." + std::to_string(getpid()) + "." + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::filesystem::path tokenizer_dir(const std::string& name) {
  auto dir = source_dir() / ".cache" / "tokenizers" / name;
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    ADD_FAILURE() << "missing " << dir << "; run `make setup` to fetch the real tokenizers";
  }
  return dir;
}

std::filesystem::path furlong_binary() {
  return binary_dir() / "furlong";
}

std::string shell_quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) result.output.append(buf.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string run_python(const std::string& script, const std::vector<std::string>& args) {
  std::string cmd = shell_quote(python().string()) + " " +
                    shell_quote((source_dir() / "scripts" / script).string());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  auto result = run_command(cmd);
  EXPECT_EQ(result.exit_code, 0) << "oracle script failed: " << cmd << "\n" << result.output;
  return result.output;
}

std::filesystem::path cached_oracle(
    const std::string& name, const std::string& script, const std::string& key,
    const std::function<std::vector<std::string>(const std::filesystem::path& dir)>& prepare) {
  std::ifstream in(source_dir() / "scripts" / script, std::ios::binary);
  std::string material((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  material += '\0' + key;
  // The variables that choose torch's CPU code paths (and so the oracle's last bits): a run
  // capped at AVX2 gets its own fixtures, computed under the same cap as the code it checks.
  for (const char* var : {"ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA"}) {
    const char* value = std::getenv(var);
    material += '\0' + std::string(var) + '=' + (value ? value : "");
  }
  auto cache = binary_dir() / "testdata" / "oracle_cache";
  auto final_dir = cache / (name + "." + std::to_string(std::hash<std::string>{}(material)));
  if (std::filesystem::exists(final_dir / "DONE")) return final_dir;
  auto tmp = cache / (name + ".tmp." + std::to_string(getpid()));
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  const bool failed_before = ::testing::Test::HasFailure();
  run_python(script, prepare(tmp));
  // A failed run (run_python reported it) is not cached: the next run tries again.
  if (::testing::Test::HasFailure() && !failed_before) {
    std::filesystem::remove_all(tmp);
    return final_dir;
  }
  std::ofstream(tmp / "DONE") << "ok\n";
  std::error_code ec;
  std::filesystem::rename(tmp, final_dir, ec);  // fails harmlessly if another process won
  if (ec) std::filesystem::remove_all(tmp);
  return final_dir;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected furlong::Error, got another exception: " << e.what();
    return "<other exception>";
  }
  ADD_FAILURE() << "expected furlong::Error, nothing was thrown";
  return "<no error>";
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes() || a.numel() == 0) return a.numel() == 0 ? 0.0 : 1e30;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

double max_rel_diff(const at::Tensor& a, const at::Tensor& b, double floor) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes() || a.numel() == 0) return a.numel() == 0 ? 0.0 : 1e30;
  auto bd = b.to(at::kDouble);
  auto denom = bd.abs().clamp_min(floor);
  return ((a.to(at::kDouble) - bd).abs() / denom).max().item<double>();
}

ScriptServer::ScriptServer(const std::filesystem::path& script,
                           const std::vector<std::string>& args, const std::filesystem::path& dir) {
  const auto port_file = dir / (script.stem().string() + ".port");
  std::filesystem::remove(port_file);
  std::vector<std::string> argv{python().string(), script.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  for (const char* a : {"--port", "0", "--port-file"}) argv.emplace_back(a);
  argv.push_back(port_file.string());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  for (int i = 0; i < 300 && !std::filesystem::exists(port_file); ++i)  // at most 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::ifstream(port_file) >> port_;
}

ScriptServer::~ScriptServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string ScriptServer::url(const std::string& scheme) const {
  return scheme + "://127.0.0.1:" + std::to_string(port_);
}

}  // namespace furlong::testing
