#include "kernels/gated_delta_decode.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "core/error.h"

namespace furlong::kernels {
namespace {

void check_state(const at::Tensor& s, int64_t Hv, int64_t dk, int64_t dv, const char* what) {
  FURLONG_ASSERT(s.defined() && s.device().is_cpu() && s.scalar_type() == at::kFloat &&
                     s.is_contiguous() && s.dim() == 3 && s.size(0) == Hv && s.size(1) == dk &&
                     s.size(2) == dv,
                 "gated_delta_decode_step: ", what, " must be fp32 contiguous [", Hv, ", ", dk,
                 ", ", dv, "] on the CPU");
}

// One (document, head): S [dk, dv] -> N [dk, dv], o [dv]; kv and delta scratch of dv floats.
void step_head(const float* S, float* N, const float* q, const float* k, const float* v,
               float decay, float beta, float* o, float* kv, int64_t dk, int64_t dv) {
  for (int64_t j = 0; j < dv; ++j) kv[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    const float* row = S + i * dv;
    const float ki = k[i];
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) kv[j] += (row[j] * decay) * ki;
  }
  float* delta = kv;  // kv is not needed past this point
#pragma omp simd
  for (int64_t j = 0; j < dv; ++j) delta[j] = (v[j] - kv[j]) * beta;
  for (int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    const float* row = S + i * dv;
    float* out = N + i * dv;
    const float ki = k[i], qi = q[i];
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) {
      const float n = row[j] * decay + ki * delta[j];
      out[j] = n;
      o[j] += n * qi;
    }
  }
}

}  // namespace

at::Tensor gated_delta_decode_step(const at::Tensor& q_BHK, const at::Tensor& k_BHK,
                                   const at::Tensor& v_BHV, const at::Tensor& g_BH,
                                   const at::Tensor& beta_BH, const std::vector<at::Tensor>& from,
                                   const std::vector<at::Tensor>& to) {
  const int64_t B = v_BHV.size(0), Hv = v_BHV.size(1), dv = v_BHV.size(2), dk = k_BHK.size(2);
  for (const auto* t : {&q_BHK, &k_BHK, &v_BHV, &g_BH, &beta_BH}) {
    FURLONG_ASSERT(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous(),
                   "gated_delta_decode_step: inputs must be fp32 contiguous CPU tensors");
  }
  FURLONG_ASSERT(static_cast<int64_t>(from.size()) == B && static_cast<int64_t>(to.size()) == B,
                 "gated_delta_decode_step: ", B, " documents but ", from.size(), " / ", to.size(),
                 " state buffers");
  for (int64_t b = 0; b < B; ++b) {
    check_state(from[static_cast<size_t>(b)], Hv, dk, dv, "from");
    check_state(to[static_cast<size_t>(b)], Hv, dk, dv, "to");
    FURLONG_ASSERT(!from[static_cast<size_t>(b)].is_same(to[static_cast<size_t>(b)]),
                   "gated_delta_decode_step: to may not alias from");
  }
  auto o_BHV = at::empty({B, Hv, dv}, v_BHV.options());
  const float* q = q_BHK.data_ptr<float>();
  const float* k = k_BHK.data_ptr<float>();
  const float* v = v_BHV.data_ptr<float>();
  const float* g = g_BH.data_ptr<float>();
  const float* beta = beta_BH.data_ptr<float>();
  float* o = o_BHV.data_ptr<float>();
  at::parallel_for(0, B * Hv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(dv));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / Hv, h = bh % Hv;
      const float* S = from[static_cast<size_t>(b)].data_ptr<float>() + h * dk * dv;
      float* N = to[static_cast<size_t>(b)].data_ptr<float>() + h * dk * dv;
      step_head(S, N, q + bh * dk, k + bh * dk, v + bh * dv, std::exp(g[bh]), beta[bh], o + bh * dv,
                scratch.data(), dk, dv);
    }
  });
  return o_BHV;
}

}  // namespace furlong::kernels
