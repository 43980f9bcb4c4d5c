// furlong init-model: a freshly initialized HF model directory (config.json, safetensors,
// tokenizer files) from a config, seeded, so tests and the demo need no hub.
#include <ATen/ATen.h>

#include <filesystem>

#include "app/common.h"
#include "core/dtype.h"
#include "core/files.h"
#include "core/log.h"
#include "models/hf_model.h"
#include "models/registry.h"

namespace furlong::app {
namespace {

namespace fs = std::filesystem;

// Fills vocab_size and special token ids from the tokenizer where the config leaves them out.
void adopt_tokenizer(Json& config, const fs::path& tokenizer_dir, const std::string& where) {
  auto tok = tokenizer::Tokenizer::from_directory(tokenizer_dir);
  int64_t needed = tok.vocab_size();
  if (!config.contains("vocab_size")) {
    config["vocab_size"] = needed;
  } else {
    int64_t given = json_get<int64_t>(config, "vocab_size", where);
    FURLONG_CHECK(given >= needed, where, ": vocab_size ", given, " is smaller than the ", needed,
                  " ids of the tokenizer in ", tokenizer_dir.string());
  }
  auto set_if_absent = [&](const char* key, std::optional<int64_t> id) {
    if (!config.contains(key) && id) config[key] = *id;
  };
  set_if_absent("bos_token_id", tok.bos_token_id());
  set_if_absent("eos_token_id", tok.eos_token_id());
  set_if_absent("pad_token_id", tok.pad_token_id());
}

void copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "chat_template.jinja", "generation_config.json"}) {
    if (fs::exists(from / name)) {
      fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
    }
  }
}

}  // namespace

int run_init_model(const std::vector<std::string>& args) {
  InitModelOptions o;
  config::FlagSet flags("furlong init-model",
                        "Write a randomly initialized HF model directory from a config.");
  register_flags(flags, o);
  if (!flags.parse(args)) return 0;
  auto dtype = parse_dtype(o.dtype, "--dtype");
  Json config = read_json_file(o.config);
  FURLONG_CHECK(config.is_object(), o.config, ": expected a JSON object");
  if (!o.tokenizer.empty()) adopt_tokenizer(config, o.tokenizer, o.config);
  // No checkpoint to compare with here: the config's sanity limits (create_model) and the
  // memory estimate are what stand between a typo and an allocation of terabytes.
  auto model = models::create_model(config, o.config);
  models::check_memory_for_weights(*model, at::kFloat, at::kCPU, o.config);
  model->materialize(at::kFloat);
  models::init_weights(*model, static_cast<uint64_t>(o.seed));

  fs::path out(o.out);
  FURLONG_CHECK(!fs::exists(out / "config.json"), out.string(),
                ": already holds a model (config.json); choose an empty directory");
  ensure_directory(out);
  models::save_hf_model(*model, out, dtype);
  if (!o.tokenizer.empty()) copy_tokenizer_files(o.tokenizer, out);
  LOG_INFO("wrote ", model->config().architecture, " with ", model->num_parameters(),
           " parameters (", dtype_name(dtype), ", seed ", o.seed, ") to ", out.string());
  return 0;
}

}  // namespace furlong::app
