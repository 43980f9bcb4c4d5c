// LoRA adapters in the model (models/lora.h) against PEFT + transformers (oracle:
// scripts/oracles/hf_model_oracle.py with "lora"): a tiny random model gets PEFT adapters (lora_B
// drawn at random so they matter) on every target kind; furlong loads the base directory and
// the PEFT adapter directory as they are.
//  - fp32 logits within twice one implementation's rounding budget (tests/common/tolerances.h),
//    counting each adapter's two GEMMs (over D or F, then over r) as two more reductions per
//    targeted projection: 9 + 2 * 7 per layer;
//  - adapter gradients of the masked next-token loss norm-wise within 1e-4 (the bound of
//    model_parity_test.cpp, whose reduction count the adapters double at most);
//  - a fresh adapter (PEFT's init: B = 0) leaves the logits bit for bit those of the base (ATen
//    ops on both sides);
//  - save_peft_adapter writes back exactly the tensors and names PEFT saved;
//  - `furlong score --lora-adapter-path` gives the log-probs of PEFT's logits;
//  - bad adapter directories and targets fail naming the file and the field, or the target.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "common/hf_oracle.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
#include "models/registry.h"

namespace furlong::models {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name;
  Json config;
  Json lora;
};

std::vector<Case> cases() {
  auto qwen3 =
      testing::tiny_model_config(testing::TinyFamily::kQwen3, {{"vocab_size", 97},
                                                               {"intermediate_size", 96},
                                                               {"num_key_value_heads", 2},
                                                               {"max_position_embeddings", 256},
                                                               {"tie_word_embeddings", false},
                                                               {"initializer_range", 0.1}});
  qwen3["head_dim"] = 24;
  auto llama =
      testing::tiny_model_config(testing::TinyFamily::kLlama, {{"vocab_size", 97},
                                                               {"intermediate_size", 96},
                                                               {"num_key_value_heads", 2},
                                                               {"max_position_embeddings", 256},
                                                               {"tie_word_embeddings", true},
                                                               {"initializer_range", 0.1}});
  const Json all =
      Json::array({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  return {
      {"qwen3_all_linear", qwen3, {{"r", 4}, {"alpha", 8}, {"rslora", false}, {"targets", all}}},
      {"llama_attn_rslora",
       llama,
       {{"r", 8}, {"alpha", 16}, {"rslora", true}, {"targets", {"q_proj", "v_proj", "down_proj"}}}},
  };
}

std::vector<std::vector<int64_t>> documents() {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int64_t> token(0, 96);
  std::vector<std::vector<int64_t>> docs;
  for (int len : {11, 17, 5}) {
    std::vector<int64_t> doc(len);
    for (auto& t : doc) t = token(rng);
    docs.push_back(doc);
  }
  return docs;
}

std::vector<std::vector<int64_t>> loss_mask(const std::vector<std::vector<int64_t>>& docs) {
  std::vector<std::vector<int64_t>> masks;
  for (const auto& d : docs) {
    std::vector<int64_t> m(d.size());
    for (size_t i = 0; i < d.size(); ++i) m[i] = i >= 1 && i % 3 != 0 ? 1 : 0;
    masks.push_back(m);
  }
  return masks;
}

const fs::path& oracle_dir() {
  static const fs::path dir = [] {
    Json plan = Json::array();
    const auto docs = documents();
    for (const auto& c : cases()) {
      plan.push_back({{"name", c.name},
                      {"mode", "create"},
                      {"config", c.config},
                      {"seed", 21},
                      {"dtype", "float32"},
                      {"attn", "sdpa"},
                      {"perturb", true},
                      {"documents", docs},
                      {"loss_mask", loss_mask(docs)},
                      {"want", {"logits", "grads"}},
                      {"lora", c.lora}});
    }
    return testing::run_hf_model_oracle("lora_parity", plan);
  }();
  return dir;
}

std::unique_ptr<CausalLM> load(const Case& c) {
  return load_hf_model(oracle_dir() / c.name / "model",
                       {.dtype = at::kFloat, .lora_adapter = oracle_dir() / c.name / "adapter"});
}

// One implementation's fp32 logit rounding budget with adapters on `targets` projections.
double logits_budget(const Case& c, double abs_scale) {
  const double layers = c.config["num_hidden_layers"].get<double>();
  const double reductions =
      (9.0 + 2.0 * static_cast<double>(c.lora["targets"].size())) * layers + 2;
  return testing::tol::gamma_prob(reductions * 96.0, testing::tol::kUFp32) * abs_scale;
}

TEST(LoraParity, Fp32LogitsMatchPeft) {
  const auto batch = PackedBatch::from_documents(documents());
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    auto model = load(c);
    EXPECT_EQ(model->lora().rank, c.lora["r"].get<int64_t>());
    auto ref = io::SafetensorsFile::open(oracle_dir() / c.name / "outputs.safetensors");
    c10::NoGradGuard no_grad;
    for (bool fused : {true, false}) {
      const ForwardOptions opts{.attn = AttnImpl::kSdpa,
                                .activation_checkpointing = false,
                                .fused_kernels = fused,
                                .moe = {}};
      const auto logits = model->forward_logits(batch, opts);
      const double diff = testing::max_abs_diff(logits, ref->tensor("logits"));
      const auto& w = model->weights();
      const double scale = testing::tol::head_abs_scale(
          model->forward_hidden(batch, opts), model->head_weight(w[0], w[model->final_unit()]));
      const double tol = 2 * logits_budget(c, scale);
      EXPECT_LE(testing::tol::noted("lora_logits_fp32", diff, tol), tol) << "fused " << fused;
    }
  }
}

TEST(LoraParity, AdapterGradientsMatchPeft) {
  const auto docs = documents();
  const auto masks = loss_mask(docs);
  const auto batch = PackedBatch::from_documents(docs);
  auto [targets, valid] = testing::next_token_targets(docs, &masks);
  const auto rows = valid.nonzero().squeeze(1);
  for (const auto& c : cases()) {
    for (bool checkpoint : {false, true}) {
      SCOPED_TRACE(c.name + (checkpoint ? " (activation checkpointing)" : ""));
      auto model = load(c);
      auto ref = io::SafetensorsFile::open(oracle_dir() / c.name / "outputs.safetensors");
      for (auto& unit : model->weights()) {
        for (auto& t : unit) t.requires_grad_(false);
      }
      std::vector<std::pair<std::string, at::Tensor>> adapters;
      for (auto& [name, t] : model->named_weights()) {
        if (!is_lora_parameter(name)) continue;
        t.requires_grad_(true);
        adapters.emplace_back(name, t);
      }
      ASSERT_FALSE(adapters.empty());
      const ForwardOptions opts{.attn = AttnImpl::kSdpa,
                                .activation_checkpointing = checkpoint,
                                .fused_kernels = true,
                                .moe = {}};
      const auto hidden = model->forward_hidden(batch, opts);
      const auto& w = model->weights();
      const auto lp = token_logprobs(hidden.index_select(0, rows),
                                     model->head_weight(w[0], w[model->final_unit()]),
                                     targets.index_select(0, rows), {.with_entropy = false});
      (-lp.logprobs_T.mean()).backward();
      for (const auto& [name, t] : adapters) {
        const auto want = ref->tensor("grad." + name);
        const double rel =
            (t.grad() - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-12);
        EXPECT_LE(testing::tol::noted("lora_grad_rel", rel, 1e-4), 1e-4) << name;
      }
      // Every adapter PEFT trained has its gradient here (and only those).
      size_t peft_adapters = 0;
      for (const auto& t : ref->tensors()) peft_adapters += is_lora_parameter(t.name) ? 1 : 0;
      EXPECT_EQ(adapters.size(), peft_adapters);
    }
  }
}

TEST(Lora, AFreshAdapterLeavesTheBaseModelsLogitsBitForBit) {
  const Case c = cases()[0];
  const auto batch = PackedBatch::from_documents(documents());
  auto base = load_hf_model(oracle_dir() / c.name / "model", {.dtype = at::kFloat});
  auto fresh = create_model(read_hf_config(oracle_dir() / c.name / "model"), "config.json");
  LoraSpec spec;
  spec.rank = 4;
  spec.targets = all_linear_lora_targets();
  fresh->add_lora(spec);
  fresh->materialize(at::TensorOptions().dtype(at::kFloat));
  init_weights(*fresh, 5);
  load_weights(*fresh, io::HfWeights::open(oracle_dir() / c.name / "model"),
               oracle_dir() / c.name / "model");
  c10::NoGradGuard no_grad;
  // The ATen op chain on both sides: an MLP with adapters computes its SwiGLU with ATen ops (the
  // fused kernel takes no adapters), so with fused kernels only the rounding of the MLP differs.
  const ForwardOptions aten{.attn = AttnImpl::kSdpa,
                            .activation_checkpointing = false,
                            .fused_kernels = false,
                            .moe = {}};
  EXPECT_TRUE(at::equal(fresh->forward_logits(batch, aten), base->forward_logits(batch, aten)));
  // lora_A holds PEFT's kaiming-uniform draw: within +-1/sqrt(in), not all zero.
  const auto a = fresh->weight("model.layers.0.mlp.down_proj.lora_A.weight");
  EXPECT_LE(a.abs().max().item<double>(), 1.0 / std::sqrt(96.0));
  EXPECT_GT(a.abs().max().item<double>(), 0.5 / std::sqrt(96.0));
}

TEST(Lora, SavedAdapterIsWhatPeftSaved) {
  const Case c = cases()[1];
  auto model = load(c);
  const auto out = testing::scratch_dir() / "adapter";
  save_peft_adapter(*model, out, at::kFloat, (oracle_dir() / c.name / "model").string());
  auto mine = io::SafetensorsFile::open(out / "adapter_model.safetensors");
  auto peft =
      io::SafetensorsFile::open(oracle_dir() / c.name / "adapter" / "adapter_model.safetensors");
  ASSERT_EQ(mine->tensors().size(), peft->tensors().size());
  for (const auto& t : peft->tensors()) {
    ASSERT_NE(mine->find(t.name), nullptr) << t.name;
    EXPECT_TRUE(at::equal(mine->tensor(t.name), peft->tensor(t.name).to(at::kFloat))) << t.name;
  }
  const LoraSpec back = read_peft_adapter_config(out);
  EXPECT_EQ(back.rank, 8);
  EXPECT_TRUE(back.rslora);
  auto targets = back.targets;  // PEFT keeps them as a set
  std::sort(targets.begin(), targets.end());
  EXPECT_EQ(targets, (std::vector<std::string>{"down_proj", "q_proj", "v_proj"}));
}

// `furlong score --lora-adapter-path` scores rows under the base model with the PEFT adapter:
// the log-probs of PEFT's logits, within the fp32 log-prob bound of the parity test.
TEST(Lora, ScoreWithAPeftAdapterGivesPeftsLogprobs) {
  const Case c = cases()[0];
  const auto dir = testing::scratch_dir();
  const auto docs = documents();
  {
    std::ofstream rows(dir / "rows.jsonl");
    for (const auto& d : docs) rows << Json{{"input_ids", d}}.dump() << "\n";
  }
  const auto r = testing::run_command(
      testing::shell_quote(testing::furlong_binary().string()) + " score --hf-checkpoint " +
      testing::shell_quote((oracle_dir() / c.name / "model").string()) + " --lora-adapter-path " +
      testing::shell_quote((oracle_dir() / c.name / "adapter").string()) +
      " --dtype float32 --input " + testing::shell_quote((dir / "rows.jsonl").string()) +
      " --output " + testing::shell_quote((dir / "scored.jsonl").string()) + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto ref = io::SafetensorsFile::open(oracle_dir() / c.name / "outputs.safetensors");
  const auto logp_TV = at::log_softmax(ref->tensor("logits").to(at::kDouble), -1);
  auto model = load(c);
  c10::NoGradGuard no_grad;
  const auto batch = PackedBatch::from_documents(docs);
  const auto& w = model->weights();
  const double scale = testing::tol::head_abs_scale(
      model->forward_hidden(batch, {}), model->head_weight(w[0], w[model->final_unit()]));
  const double tol =
      4 * logits_budget(c, scale) + 2 * testing::max_logprob_rounding(ref->tensor("logits"), docs);
  std::ifstream in(dir / "scored.jsonl");
  int64_t offset = 0;
  double worst = 0;
  for (const auto& d : docs) {
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    const auto got = Json::parse(line)["logprobs"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), d.size() - 1);
    for (size_t i = 0; i + 1 < d.size(); ++i) {
      const double want = logp_TV[offset + static_cast<int64_t>(i)][d[i + 1]].item<double>();
      worst = std::max(worst, std::abs(got[i] - want));
    }
    offset += static_cast<int64_t>(d.size());
  }
  EXPECT_LE(testing::tol::noted("lora_score_logprobs", worst, tol), tol);
}

TEST(Lora, BadAdaptersAndTargetsNameTheirFileFieldOrTarget) {
  const Case c = cases()[1];
  const auto dir = testing::scratch_dir();
  const Json good =
      Json::parse(read_file(oracle_dir() / c.name / "adapter" / "adapter_config.json"));
  const std::vector<std::pair<Json, std::string>> bad = {
      {{{"peft_type", "PREFIX_TUNING"}}, "peft_type"},
      {{{"r", 0}}, "r must be"},
      {{{"use_dora", true}}, "use_dora"},
      {{{"target_modules", {"q_proj", "lm_head"}}}, "lm_head"},
      {{{"modules_to_save", {"lm_head"}}}, "modules_to_save"},
  };
  for (const auto& [patch, needle] : bad) {
    Json config = good;
    config.update(patch);
    std::ofstream(dir / "adapter_config.json") << config.dump();
    const std::string error = testing::error_of([&] { read_peft_adapter_config(dir); });
    EXPECT_NE(error.find(needle), std::string::npos) << error;
    EXPECT_NE(error.find("adapter_config.json"), std::string::npos) << error;
  }
  // Qwen3-MoE with every layer sparse: attention takes adapters, the experts do not.
  const Json moe = testing::as_qwen3_moe(
      cases()[0].config, {{"decoder_sparse_step", 1}, {"mlp_only_layers", Json::array()}});
  LoraSpec spec;
  spec.rank = 2;
  spec.targets = {"gate_proj"};
  EXPECT_NE(testing::error_of([&] {
              create_model(moe, "moe")->add_lora(spec);
            }).find("names no projection"),
            std::string::npos);
  spec.targets = {"q_proj"};
  auto attn_only = create_model(moe, "moe");
  attn_only->add_lora(spec);
  EXPECT_EQ(attn_only->lora_slots(0, 1).first >= 0, true);  // slot 1: q_proj
  EXPECT_NE(testing::error_of([&] { attn_only->add_lora(spec); }).find("already"),
            std::string::npos);
}

}  // namespace
}  // namespace furlong::models
