// Seeded random models built in-process (furlong's own initializer), for tests that need a
// model object or an HF directory without running `furlong init-model`.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/json_util.h"
#include "models/causal_lm.h"

namespace furlong::testing {

// The model of `config` with fp32 weights from models::init_weights(seed).
std::unique_ptr<models::CausalLM> random_model(const Json& config, uint64_t seed);

// Saves random_model(config, seed) to `dir` as an HF directory in `dtype`; with `tokenizer`,
// copies its tokenizer.json and tokenizer_config.json beside the weights.
void write_random_model(const std::filesystem::path& dir, const Json& config, uint64_t seed,
                        c10::ScalarType dtype,
                        const std::optional<std::filesystem::path>& tokenizer = std::nullopt);

}  // namespace furlong::testing
