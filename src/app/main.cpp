// furlong: RL post-training for LLMs. This file only dispatches to subcommands.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "app/commands.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "furlong_version.h"  // generated (src/app/CMakeLists.txt)

namespace furlong::app {
namespace {

// The commit is captured at build time (cmake/GitVersion.cmake): "unknown" without git,
// "-dirty" when the tree had uncommitted changes; libtorch is the version built against.
void print_version() {
  std::printf("furlong %s\nlibtorch %s\n", FURLONG_GIT_COMMIT, FURLONG_TORCH_VERSION);
}

void print_usage() {
  std::printf("usage: furlong <command> [flags]   (furlong <command> --help for its flags)\n");
  std::printf("       furlong --version\n\n");
  for (const auto& c : commands()) std::printf("  %-14s %s\n", c.name.c_str(), c.summary.c_str());
}

// A command's flags, described on a static options value (only --help and the CLI reference
// read them; each command's run function parses into its own options).
template <typename Options>
void flags_of(config::FlagSet& flags) {
  static Options options;
  register_flags(flags, options);
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"score", "per-token log-probs and entropies of JSONL rows under a HF model", run_score,
       flags_of<ScoreOptions>},
      {"tokenize", "text <-> token ids; chat messages through the chat template", run_tokenize,
       flags_of<TokenizeOptions>},
      {"init-model", "write a randomly initialized HF model directory from a config",
       run_init_model, flags_of<InitModelOptions>},
      {"train", "RL (GRPO and relatives) or SFT of a HF model with the FSDP backend, on every rank",
       run_train, flags_of<TrainCommandOptions>},
      {"launch", "start N local ranks of a command (torchrun's environment)", run_launch,
       flags_of<LaunchFlags>},
      {"export-hf", "write a HF model directory from a training checkpoint", run_export_hf,
       flags_of<ExportHfOptions>},
      {"serve", "serve a HF model over HTTP (SGLang's endpoints, OpenAI completions)", run_serve,
       flags_of<ServeOptions>},
      {"generate", "batched generation of JSONL prompts with the rollout engine (+ log-probs)",
       run_generate, flags_of<GenerateOptions>},
      {"cli-reference", "print the markdown CLI reference (docs/cli.md)",
       [](const std::vector<std::string>&) {
         std::fputs(cli_reference_markdown().c_str(), stdout);
         return 0;
       },
       nullptr},
  };
  return kCommands;
}

std::string cli_reference_markdown() {
  std::string out =
      "# furlong CLI reference\n\n"
      "Generated from the flag table (`src/app/flag_table.cpp`) by `furlong cli-reference`;\n"
      "a test checks that this file is current. Every boolean flag `--x` also has `--no-x`.\n"
      "Flags can be given in a YAML file with `--config FILE` (keys are flag names, with `_` or\n"
      "`-`); the command line overrides the file, which overrides the defaults.\n\n";
  for (const auto& c : commands()) {
    if (!c.describe_flags) continue;
    config::FlagSet flags("furlong " + c.name, c.summary);
    c.describe_flags(flags);
    out += flags.markdown_reference();
  }
  return out;
}

}  // namespace furlong::app

int main(int argc, char** argv) {
  furlong::configure_host_memory();  // before any tensor exists
  using namespace furlong::app;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    print_version();
    return 0;
  }
  for (const auto& command : commands()) {
    if (command.name != args[0]) continue;
    try {
      return command.run(std::vector<std::string>(args.begin() + 1, args.end()));
    } catch (const furlong::Error& e) {
      std::fprintf(stderr, "furlong %s: error: %s\n", command.name.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "furlong %s: unexpected error: %s\n", command.name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "furlong: unknown command '%s'\n\n", args[0].c_str());
  print_usage();
  return 2;
}
