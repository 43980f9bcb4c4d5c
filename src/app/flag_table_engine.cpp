// Flags of the rollout engine (shared by generate, serve and train) and of `furlong generate`
// (part of the flag table, see flag_table.cpp).
#include "app/commands.h"

namespace furlong::app {

void add_engine_flags(config::FlagSet& f, engine::EngineOptions& e) {
  f.set_group("Engine");
  f.add("dtype", &e.dtype,
        "compute dtype: auto (the checkpoint's where the hardware computes it natively, else "
        "float32), float32 or bfloat16");
  f.add("device", &e.device, "cpu or cuda[:i] (default: cuda if available, else cpu)");
  f.add("attn-implementation", &e.attn_implementation,
        "attention path: sdpa (fused kernel) or eager (plain math reference)")
      .choices = {"sdpa", "eager"};
  f.add("fused-kernels", &e.fused_kernels,
        "one-pass CPU kernels for RMSNorm/RoPE/SwiGLU (off: ATen ops mirroring transformers)");
  f.add_enum<engine::PrepackWeights>(
      "prepack-weights", &e.prepack_weights, engine::prepack_weights_choices(),
      engine::parse_prepack_weights,
      "also keep bf16 weights in oneDNN's GEMM layout for GEMMs of 8+ rows (a second copy "
      "of their bytes): auto = on CPUs with AMX while weights and copies take at most half of "
      "what --mem-fraction-static gives, on, off");
  f.add("kv-block-size", &e.kv_block_size, "tokens per KV-cache block");
  f.add("max-total-tokens", &e.max_total_tokens,
        "KV-cache capacity in tokens over all running requests (each request reserves "
        "prompt + max-new-tokens when admitted); 0 = as many as --mem-fraction-static allows. "
        "An explicit value must fit in the memory free after the weights");
  f.add("mem-fraction-static", &e.mem_fraction_static,
        "share of the device's memory for the weights plus the KV cache, as in SGLang; the "
        "cache also leaves (1 - fraction) of the total free (0 = 0.7 on CPU, 0.85 on CUDA)");
  f.add("max-running-requests", &e.max_running_requests, "requests decoded together at most");
  f.add("max-prefill-tokens", &e.max_prefill_tokens, "prompt tokens prefilled per step");
  f.add("chunked-prefill-size", &e.chunked_prefill_size,
        "prefill longer prompts in chunks of this many tokens, one chunk per step beside the "
        "decodes (<= 0: never chunk)");
  f.add("prefix-sharing", &e.prefix_sharing,
        "requests with the same prompt share its KV blocks and one prefill (same tokens; "
        "--no-prefix-sharing turns it off, like SGLang's --disable-radix-cache)");
  f.add("context-length", &e.context_length,
        "max prompt + generated tokens, > 0 (0 = the model's max_position_embeddings)");
  f.add("num-threads", &e.num_threads, "CPU threads for tensor math (0 = libtorch default)");
  f.add("exact-logprobs", &e.exact_logprobs,
        "report log-probs bit-identical to the trainer's recomputation (one extra prefill of "
        "prompt + output per finished request)");
  f.add("pack-shared-prompts", &e.pack_shared_prompts,
        "that recomputation holds a prompt once for the requests finishing together that share "
        "it, as the trainer's --pack-shared-prompts does (keep the two equal)");
  f.add("decode-log-interval", &e.decode_log_interval,
        "log one line (running and queued requests, KV-cache use, tokens/s) every this many "
        "decode steps, as SGLang does (0 = never)");
}

void register_flags(config::FlagSet& f, GenerateOptions& o) {
  f.set_group("Model");
  f.add("hf-checkpoint", &o.hf_checkpoint,
        "HF model directory (config.json, safetensors, tokenizer files)")
      .required = true;
  f.set_group("Data");
  f.add("input", &o.input,
        "JSONL prompts: {\"input_ids\": [...]}, {\"text\": ...} or {\"messages\": [...]} (chat "
        "template with the generation prompt); input_ids win, then messages, then text")
      .required = true;
  f.add("output", &o.output,
        "JSONL rows {\"index\", \"sample_index\", \"output_ids\", \"text\", \"logprobs\", "
        "\"finish_reason\", \"prompt_tokens\"}: n-samples rows per prompt, in input order")
      .required = true;
  f.add("add-special-tokens", &o.add_special_tokens,
        "for text rows: apply the tokenizer's post-processor (e.g. a BOS token)");
  f.set_group("Sampling");
  f.add("temperature", &o.temperature, "sampling temperature (0 = greedy)");
  f.add("top-p", &o.top_p, "nucleus sampling mass in (0, 1]");
  f.add("top-k", &o.top_k, "sample among the k most likely tokens (<= 0: off)");
  f.add("min-p", &o.min_p, "drop tokens below min-p times the top probability, in [0, 1)");
  f.add("max-new-tokens", &o.max_new_tokens, "tokens generated per sample at most");
  f.add("seed", &o.seed,
        "base seed: sample j of prompt i uses its own stream derived from (seed, i, j), so "
        "results do not depend on batching");
  f.add("ignore-eos", &o.ignore_eos, "keep generating past the eos token");
  f.add("n-samples", &o.n_samples, "samples per prompt");
  f.add("stop-token-ids", &o.stop_token_ids, "extra token ids that end a sample");
  f.add("stop", &o.stop, "strings that end a sample (trimmed from the text)");
  o.engine.decode_log_interval = 0;  // generate shows a progress bar instead
  add_engine_flags(f, o.engine);
}

}  // namespace furlong::app
