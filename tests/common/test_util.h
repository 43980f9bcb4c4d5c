// Shared helpers for furlong's tests: where the source tree, the venv's Python, the real
// tokenizer files and scratch space are, and how to run the committed Python oracles.
#pragma once

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace furlong::testing {

std::filesystem::path source_dir();
std::filesystem::path binary_dir();
// The interpreter with torch/transformers/tokenizers (the project venv unless FURLONG_PYTHON).
std::filesystem::path python();
// A fresh empty directory unique to the calling test (under the build tree).
std::filesystem::path scratch_dir();
// Real tokenizer files fetched by `make setup` (.cache/tokenizers/<name>): "qwen3", "llama3".
std::filesystem::path tokenizer_dir(const std::string& name);
// Path to the furlong binary in the build tree.
std::filesystem::path furlong_binary();

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs a shell command, capturing its output.
CommandResult run_command(const std::string& command);
// Runs scripts/<script> with the venv Python; fails the calling test if it exits non-zero.
std::string run_python(const std::string& script, const std::vector<std::string>& args);
// Runs an oracle script once per distinct input in this build tree and returns the directory
// holding its outputs. `prepare(dir)` writes any input files into the fresh directory and
// returns the script's arguments. The cache key hashes the script's source and `key`; concurrent
// test processes (ctest -j) may both compute it, and the first to finish wins the rename.
std::filesystem::path cached_oracle(
    const std::string& name, const std::string& script, const std::string& key,
    const std::function<std::vector<std::string>(const std::filesystem::path& dir)>& prepare);
// Quotes one argument for /bin/sh.
std::string shell_quote(const std::string& arg);

// The message of the furlong::Error `fn` throws; a test failure if it throws anything else or
// nothing.
std::string error_of(const std::function<void()>& fn);

// max |a - b| over all elements (both cast to double, same shape required).
double max_abs_diff(const at::Tensor& a, const at::Tensor& b);
// max |a - b| / max(|b|, floor).
double max_rel_diff(const at::Tensor& a, const at::Tensor& b, double floor = 1e-6);

// A Python server of the source tree (an example env) as a child process on a kernel-chosen
// loopback port: started with `args` plus "--port 0 --port-file F", waited for (30 s at most;
// port() is 0 when it did not come up), killed on destruction.
class ScriptServer {
 public:
  ScriptServer(const std::filesystem::path& script, const std::vector<std::string>& args,
               const std::filesystem::path& dir);
  ~ScriptServer();
  ScriptServer(const ScriptServer&) = delete;
  ScriptServer& operator=(const ScriptServer&) = delete;
  int port() const { return port_; }
  std::string url(const std::string& scheme = "http") const;

 private:
  int pid_ = -1;
  int port_ = 0;
};

}  // namespace furlong::testing
