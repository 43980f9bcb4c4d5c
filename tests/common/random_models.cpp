#include "common/random_models.h"

#include "models/hf_model.h"
#include "models/registry.h"

namespace furlong::testing {

namespace fs = std::filesystem;

std::unique_ptr<models::CausalLM> random_model(const Json& config, uint64_t seed) {
  auto model = models::create_model(config, "test config");
  model->materialize(at::kFloat);
  models::init_weights(*model, seed);
  return model;
}

void write_random_model(const fs::path& dir, const Json& config, uint64_t seed,
                        c10::ScalarType dtype, const std::optional<fs::path>& tokenizer) {
  auto model = random_model(config, seed);
  fs::create_directories(dir);
  models::save_hf_model(*model, dir, dtype);
  if (!tokenizer) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(*tokenizer / name, dir / name, fs::copy_options::overwrite_existing);
  }
}

}  // namespace furlong::testing
