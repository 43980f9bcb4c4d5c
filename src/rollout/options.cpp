#include "rollout/options.h"

#include "core/dtype.h"
#include "core/error.h"

namespace furlong::rollout {

std::string EngineModelOptions::dtype(const std::string& device_type) const {
  return rl_engine_dtype_name(fp16, compute_dtype, device_type);
}

OrderedJson chat_template_kwargs(const DataOptions& d) {
  OrderedJson kwargs;
  try {
    kwargs = OrderedJson::parse(d.apply_chat_template_kwargs);
  } catch (const OrderedJson::exception& e) {
    FURLONG_FAIL("--apply-chat-template-kwargs: expected a JSON object, got '",
                 d.apply_chat_template_kwargs, "' (", e.what(), ")");
  }
  FURLONG_CHECK(kwargs.is_object(), "--apply-chat-template-kwargs: expected a JSON object, got ",
                d.apply_chat_template_kwargs);
  for (const char* reserved : {"messages", "add_generation_prompt"}) {
    FURLONG_CHECK(!kwargs.contains(reserved), "--apply-chat-template-kwargs: '", reserved,
                  "' is set by furlong itself and cannot be passed");
  }
  return kwargs;
}

}  // namespace furlong::rollout
