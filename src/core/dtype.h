// dtype names as users and HF files spell them.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <string_view>
#include <vector>

namespace furlong {

// Accepts float32/fp32/float, bfloat16/bf16, float16/fp16/half (HF config "torch_dtype" too).
// `where` names the flag or field for the error message.
c10::ScalarType parse_dtype(std::string_view name, const std::string& where);
// The HF config.json spelling: "float32", "bfloat16", "float16".
std::string dtype_name(c10::ScalarType dtype);

// Whether `device` computes bf16 natively: CUDA, or a CPU with AVX512-BF16 or AMX-BF16 (from
// /proc/cpuinfo) whose ATen kernels are not capped below AVX-512 (ATEN_CPU_CAPABILITY=avx2 or
// default stands for a CPU without them). Without it, ATen/oneDNN emulate bf16 GEMMs, slower
// than fp32.
bool has_native_bf16(const c10::Device& device);

// Whether oneDNN's bf16 GEMMs on this CPU run on AMX tiles: /proc/cpuinfo lists amx_bf16, ATen
// is not capped below AVX-512 (as above), and ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), where
// set, still allows AMX. There oneDNN's bf16 GEMM overtakes AVX512-BF16 dot products from a
// few input rows on (kernels::inference_linear routes by it).
bool cpu_has_amx_bf16();

// The compute dtype that "auto" means, the same rule for the trainer and the engine:
// `preferred` (the checkpoint's dtype for the engine, bfloat16 for the trainer) when the
// device computes it natively, else float32 (fp32 arithmetic; bf16 weights widen exactly).
// fp16 is native only on CUDA. `reason` gets a one-line explanation for the log.
c10::ScalarType resolve_auto_dtype(c10::ScalarType preferred, const c10::Device& device,
                                   std::string* reason = nullptr);

// parse_dtype, plus "auto" (resolve_auto_dtype of `preferred`). `where` names the flag.
c10::ScalarType parse_compute_dtype(std::string_view name, c10::ScalarType preferred,
                                    const c10::Device& device, const std::string& where,
                                    std::string* reason = nullptr);

// --compute-dtype of the trainer (and so of an RL run's engines): auto (resolve_auto_dtype) or a
// fixed dtype.
enum class ComputeDtype { kAuto, kBfloat16, kFloat16, kFloat32 };
// The spellings, in the enum's order: auto, bfloat16, float16, float32 (the flag's choices).
const std::vector<std::string>& compute_dtype_choices();
// One of compute_dtype_choices() as its value; anything else is an error naming --compute-dtype
// and listing the choices.
ComputeDtype parse_compute_dtype_choice(const std::string& name);
const std::string& compute_dtype_name(ComputeDtype dtype);
// The dtype `dtype` computes in on `device`: auto as resolve_auto_dtype of `preferred`. `reason`
// gets a one-line explanation for the log.
c10::ScalarType resolve_compute_dtype(ComputeDtype dtype, c10::ScalarType preferred,
                                      const c10::Device& device, std::string* reason = nullptr);

// The dtype name ("bfloat16", "float16", "float32") an RL trainer computes in on `device_type`
// ("cpu", "cuda"; "" = cuda when present, else cpu, the engine's default): float16 with --fp16,
// else --compute-dtype `compute_dtype`, with auto = bf16 where native, else fp32.
std::string trainer_dtype_name(bool fp16, ComputeDtype compute_dtype,
                               const std::string& device_type);
// The engine dtype of an RL run: the trainer's, so that trainer and engine log-probs come from
// the same arithmetic, except with --fp16 ("auto": the engine computes in bf16 or fp32 only).
std::string rl_engine_dtype_name(bool fp16, ComputeDtype compute_dtype,
                                 const std::string& device_type);

}  // namespace furlong
