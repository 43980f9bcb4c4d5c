// furlong export-hf --load DIR --out HF_DIR: a training checkpoint as a HF model directory.
#include "app/common.h"
#include "backend/checkpoint.h"
#include "core/dtype.h"

namespace furlong::app {

int run_export_hf(const std::vector<std::string>& args) {
  ExportHfOptions o;
  config::FlagSet flags("furlong export-hf",
                        "Write a HF model directory (transformers loads it) from a checkpoint.");
  register_flags(flags, o);
  if (!flags.parse(args)) return 0;
  std::optional<c10::ScalarType> dtype;
  if (!o.dtype.empty()) dtype = parse_dtype(o.dtype, "--dtype");
  backend::export_hf(o.load, o.iteration, o.out, dtype);
  return 0;
}

}  // namespace furlong::app
