#include "engine/kv_budget.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace furlong::engine {

std::string format_gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

double default_mem_fraction_static(bool cuda) {
  return cuda ? 0.85 : 0.7;
}

namespace {

std::string reserved_note(const KvBudgetInput& in) {
  if (in.reserved_bytes == 0) return "";
  return " (and " + format_gb(in.reserved_bytes) +
         " go to the DeltaNet states of --max-running-requests sequences)";
}

// An explicit --max-total-tokens: honoured when it fits in what is free after the weights.
KvBudget explicit_budget(const KvBudgetInput& in) {
  const int64_t blocks = in.requested_tokens / in.block_size +
                         (in.requested_tokens % in.block_size != 0);  // no overflow
  KvBudget b{blocks, 0, false};
  const int64_t available = std::max<int64_t>(in.memory.available_bytes - in.reserved_bytes, 0);
  const bool fits = blocks <= available / in.bytes_per_token / in.block_size;
  FURLONG_CHECK(fits, "engine: --max-total-tokens ", in.requested_tokens, " needs a KV cache of ",
                blocks <= INT64_MAX / in.bytes_per_token / in.block_size
                    ? format_gb(blocks * in.block_size * in.bytes_per_token)
                    : std::string("more than 9e9 GB"),
                " (", in.bytes_per_token, " bytes per token, ", in.dtype, ") but only ",
                format_gb(available), " is available after the weights", reserved_note(in),
                "; lower --max-total-tokens (0 sizes the cache "
                "from --mem-fraction-static) or use a smaller --dtype");
  b.bytes = blocks * in.block_size * in.bytes_per_token;
  return b;
}

}  // namespace

KvBudget plan_kv_cache(const KvBudgetInput& in) {
  FURLONG_CHECK(in.mem_fraction_static > 0 && in.mem_fraction_static <= 1,
                "engine: --mem-fraction-static must be in (0, 1], got ", in.mem_fraction_static);
  const double f = in.mem_fraction_static;
  const auto total = static_cast<double>(in.memory.total_bytes);
  const double static_budget = f * total;
  const auto reserved = static_cast<double>(in.reserved_bytes);
  FURLONG_CHECK(static_cast<double>(in.weight_bytes) + reserved < static_budget,
                "engine: the model's weights need ", format_gb(in.weight_bytes), " (", in.dtype,
                ")", reserved_note(in), " but --mem-fraction-static ", f, " of the ",
                format_gb(in.memory.total_bytes), " of memory is ",
                format_gb(static_cast<int64_t>(static_budget)),
                ", with nothing left for the KV cache; raise --mem-fraction-static, lower "
                "--max-running-requests or use a smaller --dtype (bfloat16)");
  if (in.requested_tokens > 0) return explicit_budget(in);
  const double kv = std::min(static_budget - static_cast<double>(in.weight_bytes),
                             static_cast<double>(in.memory.available_bytes) - (1 - f) * total) -
                    reserved;
  const int64_t block_bytes = in.bytes_per_token * in.block_size;
  const int64_t useful_blocks = (in.max_useful_tokens + in.block_size - 1) / in.block_size;
  const int64_t blocks =
      kv < static_cast<double>(block_bytes)
          ? 0
          : std::min<int64_t>(useful_blocks,
                              static_cast<int64_t>(kv / static_cast<double>(block_bytes)));
  FURLONG_CHECK(blocks > 0, "engine: no memory is left for the KV cache: the weights take ",
                format_gb(in.weight_bytes), reserved_note(in), ", ",
                format_gb(in.memory.available_bytes), " of ", format_gb(in.memory.total_bytes),
                " is available and --mem-fraction-static ", f, " keeps ",
                format_gb(static_cast<int64_t>((1 - f) * total)), " free; one KV block needs ",
                format_gb(block_bytes),
                ". Raise --mem-fraction-static, pass an explicit --max-total-tokens, or use a "
                "smaller --dtype");
  return {blocks, blocks * block_bytes, true};
}

}  // namespace furlong::engine
