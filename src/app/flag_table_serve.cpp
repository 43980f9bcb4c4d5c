// Flags of `furlong serve` (part of the flag table, see flag_table.cpp).
#include "app/commands.h"

namespace furlong::app {

void register_flags(config::FlagSet& f, ServeOptions& o) {
  f.set_group("Model");
  f.add("hf-checkpoint", &o.hf_checkpoint,
        "HF model directory (config.json, safetensors, tokenizer files)")
      .required = true;
  f.add("served-model-name", &o.served_model_name,
        "the model name OpenAI endpoints report (default: the checkpoint path)");
  add_engine_flags(f, o.engine);
  f.add("enable-return-routed-experts", &o.engine.record_routed_experts,
        "MoE models: record every token's top-k expert ids per layer (L * K * 4 bytes per KV "
        "slot) so that /generate can answer return_routed_experts (rollout routing replay), as "
        "SGLang's flag");
  f.set_group("Server");
  f.add("host", &o.host, "address to listen on (loopback by default; others need care)");
  f.add("port", &o.port, "TCP port (0 = any free port; the chosen one is printed)");
  f.add("api-key", &o.api_key,
        "require 'Authorization: Bearer <key>' on every endpoint except /health*");
  f.add("max-concurrent-requests", &o.max_concurrent_requests,
        "HTTP handler threads: connections served at once, 1 to 4096 (a generation holds one "
        "until done)");
  f.add("max-request-bytes", &o.max_request_bytes,
        "largest request body accepted; larger ones are answered 413 before they are read");
  f.add("paused-request-timeout", &o.paused_request_timeout_s,
        "seconds a generation request may wait while generation is paused "
        "(/pause_generation) before it is answered 503 (0 = wait for /continue_generation, as "
        "SGLang does)");
  f.add("header-timeout", &o.header_timeout_s,
        "seconds a connection may take to send its request line and headers (from connecting, or "
        "from the first byte of a kept-alive connection's next request); later, it is answered "
        "408 and closed. Connections waiting for a header hold no handler thread");
  f.add("max-waiting-connections", &o.max_waiting_connections,
        "connections waiting for a request header (new, slow or idle kept-alive) kept at once; "
        "beyond it the one waiting longest is closed");
  f.add("max-samples-per-request", &o.max_samples_per_request,
        "generations one request may queue: prompts x n of /generate, /v1/completions and "
        "/v1/chat/completions (larger requests are answered 400)");
}

}  // namespace furlong::app
