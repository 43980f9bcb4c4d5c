// furlong's subcommands: options structs, their flag registration (flag_table.cpp, the one
// table that maps every flag to a field) and entry points.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/miles_compat.h"
#include "config/flags.h"
#include "engine/engine.h"
#include "train/options.h"

namespace furlong::app {

// Shared by every command that runs a model.
struct RuntimeOptions {
  int64_t num_threads = 0;  // 0 = libtorch's default (all cores)
};

struct ScoreOptions {
  std::string hf_checkpoint;
  std::string lora_adapter_path;  // "" = none
  std::string input;
  std::string output;
  std::string dtype;  // "" = the checkpoint's dtype
  std::string attn_implementation = "sdpa";
  bool fused_kernels = true;
  int64_t max_tokens_per_batch = 8192;
  bool add_special_tokens = true;
  RuntimeOptions runtime;
};

struct TokenizeOptions {
  std::string hf_checkpoint;
  std::string input;
  std::string output;
  bool decode = false;
  bool skip_special_tokens = false;
  bool apply_chat_template = false;
  bool add_generation_prompt = false;
  bool add_special_tokens = false;
};

struct InitModelOptions {
  std::string config;     // model config.json (HF fields)
  std::string tokenizer;  // directory with tokenizer.json (+ tokenizer_config.json)
  std::string out;
  int64_t seed = 1234;
  std::string dtype = "bfloat16";
};

struct ExportHfOptions {
  std::string load;                  // the --save directory of a training run
  std::optional<int64_t> iteration;  // default: the latest
  std::string out;
  std::string dtype;  // "" = the trained policy's dtype (train::export_hf)
};

struct ServeOptions {
  std::string hf_checkpoint;
  std::string served_model_name;
  engine::EngineOptions engine;
  std::string host = "127.0.0.1";
  int64_t port = 30000;
  std::string api_key;
  int64_t max_concurrent_requests = 256;
  int64_t max_request_bytes = int64_t{64} << 20;  // engine::server::kDefaultMaxRequestBytes
  double paused_request_timeout_s = 0;            // 0 = queue until /continue_generation
  double header_timeout_s = 10;                   // engine::server::ServerOptions
  int64_t max_waiting_connections = 512;
  int64_t max_samples_per_request = 4096;  // engine::server::kDefaultMaxSamplesPerRequest
};

// `furlong generate`: batched generation of JSONL prompts through the rollout engine.
struct GenerateOptions {
  std::string hf_checkpoint;
  std::string input;
  std::string output;
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;
  int64_t top_k = -1;
  double min_p = 0.0;
  int64_t max_new_tokens = 128;
  int64_t seed = 0;  // sample j of prompt i draws with a seed derived from (seed, i, j)
  bool ignore_eos = false;
  int64_t n_samples = 1;
  std::vector<int64_t> stop_token_ids;
  std::vector<std::string> stop;
  bool add_special_tokens = false;  // for {"text"} rows
  engine::EngineOptions engine;
};

struct LaunchFlags {
  int64_t nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 0;
};

void register_flags(config::FlagSet& flags, TrainCommandOptions& options);
// Offload, --ref-load, --balance-data and the RL debug flags (flag_table_migration.cpp).
void register_migration_flags(config::FlagSet& flags, train::TrainOptions& options);
// --actor-num-nodes, --actor-num-gpus-per-node, --rollout-master-addr (flag_table_placement.cpp).
void add_placement_flags(config::FlagSet& flags, train::PlacementOptions& options);
void register_flags(config::FlagSet& flags, ExportHfOptions& options);
void register_flags(config::FlagSet& flags, LaunchFlags& options);
void register_flags(config::FlagSet& flags, ScoreOptions& options);
void register_flags(config::FlagSet& flags, TokenizeOptions& options);
void register_flags(config::FlagSet& flags, InitModelOptions& options);
void register_flags(config::FlagSet& flags, ServeOptions& options);
void register_flags(config::FlagSet& flags, GenerateOptions& options);
// The rollout engine's options as flags (group "Engine"): dtype, device, attention, KV cache,
// batching, threads. Shared by every command that runs an engine.
void add_engine_flags(config::FlagSet& flags, engine::EngineOptions& options);

int run_score(const std::vector<std::string>& args);
int run_tokenize(const std::vector<std::string>& args);
int run_init_model(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);
int run_launch(const std::vector<std::string>& args);
int run_export_hf(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);
int run_generate(const std::vector<std::string>& args);

struct Command {
  std::string name;
  std::string summary;
  std::function<int(const std::vector<std::string>&)> run;
  // Builds the command's flag table (for help and the CLI reference); null for commands
  // without flags.
  std::function<void(config::FlagSet&)> describe_flags;
};

const std::vector<Command>& commands();
// The markdown CLI reference (docs/cli.md), generated from the flag tables.
std::string cli_reference_markdown();

}  // namespace furlong::app
