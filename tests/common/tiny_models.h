// The tiny random decoders of the tests: one config.json per model family, each test's own
// sizes as overrides of it, and `furlong init-model` of a config into a model directory.
#pragma once

#include <filesystem>
#include <string>

#include "core/json_util.h"

namespace furlong::testing {

enum class TinyFamily { kQwen3, kQwen2, kLlama, kQwen3Moe };

// The config.json of a tiny `family` model: its architectures and model_type, 2 layers, hidden
// 64, MLP 128, 4 query and 2 KV heads, 64 positions, tied embeddings; Qwen3 adds head_dim 16
// (its HF default is 128), Qwen3-MoE is as_qwen3_moe of the Qwen3 one. No vocab_size: init-model
// takes the tokenizer's. `overrides` applies as a JSON merge patch (RFC 7396): each key replaces
// the base's, and a key set to null removes it.
Json tiny_model_config(TinyFamily family, const Json& overrides = Json::object());

// A tiny Qwen3.5 (Qwen3_5ForCausalLM): 4 layers (3 Gated DeltaNet, then softmax attention by
// the default interval), vocab 97, hidden 48, MLP 96, GQA in both kinds (4/2 heads of 16; 2 q/k
// and 4 value DeltaNet heads), d_k 8 != d_v 12, conv 4, partial rotary 0.25 (4 dims turned),
// untied; then `overrides` as above.
Json tiny_qwen3_5_config(const Json& overrides = Json::object());

// The tiny Qwen3.5 above made Qwen3.5-MoE (Qwen3_5MoeForCausalLM): every layer's MLP is 8
// experts of width 16, 2 per token, plus a shared expert of width 24; then `overrides`.
Json tiny_qwen3_5_moe_config(const Json& overrides = Json::object());

// A multimodal checkpoint of `text` (a tiny Qwen3.5 or Qwen3.5-MoE config above): its
// Qwen3_5(Moe)ForConditionalGeneration config, `text` as text_config beside a tiny vision tower
// (1 block, width 32, patches of 4, merged into the text width).
Json tiny_qwen3_5_multimodal_config(const Json& text);

// A dense Qwen3 `config` made Qwen3-MoE: 3 layers, 8 experts of width 32, 2 per token with
// normalized top-k weights, layer 1 dense (mlp_only_layers); then `overrides` as above.
Json as_qwen3_moe(Json config, const Json& overrides = Json::object());

// Writes `config` to <dir>/<name>.config.json and runs `furlong init-model` with the tokenizer
// files of `tokenizer` into <dir>/<name> (returned); a test failure, with init-model's output,
// if it fails.
std::filesystem::path init_model(const std::filesystem::path& dir, const std::string& name,
                                 const Json& config, const std::filesystem::path& tokenizer,
                                 int seed = 7, const std::string& dtype = "float32");

}  // namespace furlong::testing
