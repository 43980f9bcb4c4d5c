// Scalar math written so that GCC vectorizes it inside `#pragma omp simd` loops (no calls into
// libm, no branches): exp, bf16 rounding. Used by the fused CPU kernels; each function states
// its accuracy.
#pragma once

#include <cstdint>
#include <cstring>

namespace furlong::kernels {

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// e^x, relative error about 1 ulp on [-87, 88]; returns 0 below -87.3 (the result would be
// denormal) and +inf from about 88.38 on (there k = 128 overflows the exponent bits, although
// e^x is finite up to 88.72; callers pass x <= 0 (softmax) or only need 1/(1 + e^x) -> 0
// (SiLU)). NaN in, NaN out. Cody-Waite range reduction x = k ln2 + r,
// |r| <= ln2/2, the degree-7 Taylor polynomial of e^r (truncation error < 1e-8 relative), and
// 2^k through the exponent bits.
inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  float clamped = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  float k = __builtin_roundf(clamped * kLog2e);
  float r = clamped - k * kLn2Hi;
  r = r - k * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t ki = static_cast<int32_t>(k);
  float scale = bits_float(static_cast<uint32_t>(ki + 127) << 23);
  float result = p * scale;
  result = x < -87.3f ? 0.0f : result;
  result = x > 88.7f ? __builtin_inff() : result;
  return result;
}

// bf16 <-> fp32 with round-to-nearest-even (NaN stays NaN), bit-identical to c10::BFloat16.
inline uint16_t float_to_bf16_bits(float x) {
  uint32_t u = float_bits(x);
  uint32_t rounded = (u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16;
  return x != x ? static_cast<uint16_t>(0x7FC0) : static_cast<uint16_t>(rounded);
}

inline float bf16_bits_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

// Rounds a float to the nearest bf16 value and back (the value a bf16 tensor would hold).
inline float round_bf16(float x) {
  return bf16_bits_to_float(float_to_bf16_bits(x));
}

}  // namespace furlong::kernels
