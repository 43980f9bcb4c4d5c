// The flag table: every furlong flag, the field it sets and its documentation. --help, the YAML
// --config keys and docs/cli.md are all generated from here. Names and meanings follow miles
// where miles has the flag.
#include "app/commands.h"

namespace furlong::app {
namespace {

void add_runtime_flags(config::FlagSet& f, RuntimeOptions& o) {
  f.set_group("Runtime");
  f.add("num-threads", &o.num_threads,
        "CPU threads for tensor math (0 = libtorch default, all cores)");
}

}  // namespace

void register_flags(config::FlagSet& f, ScoreOptions& o) {
  f.set_group("Model");
  f.add("hf-checkpoint", &o.hf_checkpoint, "HF model directory (config.json + safetensors)")
      .required = true;
  f.add("lora-adapter-path", &o.lora_adapter_path,
        "a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) whose "
        "adapters the model computes, unmerged");
  f.add("dtype", &o.dtype, "compute dtype: float32 or bfloat16 (default: the checkpoint's)");
  f.add("attn-implementation", &o.attn_implementation,
        "attention path: sdpa (fused kernel) or eager (plain math reference)")
      .choices = {"sdpa", "eager"};
  f.add("fused-kernels", &o.fused_kernels,
        "one-pass CPU kernels for RMSNorm/RoPE/SwiGLU (off: ATen ops mirroring transformers)");
  f.set_group("Data");
  f.add("input", &o.input,
        "JSONL rows {\"input_ids\": [...]} or {\"text\": ...} (input_ids win if both), "
        "optional \"prompt_len\"")
      .required = true;
  f.add("output", &o.output, "JSONL rows {\"logprobs\": [...], \"entropy\": [...]}, input order")
      .required = true;
  f.add("add-special-tokens", &o.add_special_tokens,
        "for text rows: apply the tokenizer's post-processor (e.g. a BOS token)");
  f.add("max-tokens-per-batch", &o.max_tokens_per_batch,
        "rows are packed into forward passes of at most this many tokens");
  add_runtime_flags(f, o.runtime);
}

void register_flags(config::FlagSet& f, TokenizeOptions& o) {
  f.set_group("Tokenizer");
  f.add("hf-checkpoint", &o.hf_checkpoint,
        "directory with tokenizer.json (+ tokenizer_config.json); a model directory works")
      .required = true;
  f.set_group("Data");
  f.add("input", &o.input,
        "JSONL rows {\"text\": ...}, {\"messages\": [...]} or (with --decode) {\"input_ids\": "
        "[...]}")
      .required = true;
  f.add("output", &o.output, "JSONL rows with \"input_ids\" (and \"text\") added").required = true;
  f.add("decode", &o.decode, "turn {\"input_ids\"} rows into {\"text\"} instead");
  f.add("skip-special-tokens", &o.skip_special_tokens, "with --decode: drop special tokens");
  f.add("apply-chat-template", &o.apply_chat_template,
        "render {\"messages\"} rows with the tokenizer's chat template");
  f.add("add-generation-prompt", &o.add_generation_prompt,
        "with --apply-chat-template: end with the assistant turn's opening");
  f.add("add-special-tokens", &o.add_special_tokens,
        "for text rows: apply the tokenizer's post-processor (e.g. a BOS token)");
}

void register_flags(config::FlagSet& f, InitModelOptions& o) {
  f.enable_yaml_config(false);  // --config is the model config here
  f.set_group("Model");
  f.add("config", &o.config,
        "model config JSON with HF fields (architectures, hidden_size, num_hidden_layers, ...)")
      .required = true;
  f.add("tokenizer", &o.tokenizer,
        "tokenizer directory to copy in; sets vocab_size and special token ids when absent");
  f.add("out", &o.out, "output directory (a HF model directory transformers loads)").required =
      true;
  f.add("seed", &o.seed, "random seed for the weights");
  f.add("dtype", &o.dtype, "dtype written to the checkpoint: float32 or bfloat16");
}

}  // namespace furlong::app
