#include "kernels/cpu_kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/target_clones.h"
#include "kernels/vec_math.h"

namespace furlong::kernels {
namespace {

// Element access: storage type and conversions to / from fp32.
struct F32 {
  using S = float;
  static constexpr bool kBf16 = false;
  static FURLONG_INLINE float load(const S* p, int64_t i) { return p[i]; }
  static FURLONG_INLINE S make(float v) { return v; }
  // The value a tensor of this dtype would hold.
  static FURLONG_INLINE float round(float v) { return v; }
};

struct BF16 {
  using S = uint16_t;
  static constexpr bool kBf16 = true;
  static FURLONG_INLINE float load(const S* p, int64_t i) { return bf16_bits_to_float(p[i]); }
  static FURLONG_INLINE S make(float v) { return float_to_bf16_bits(v); }
  static FURLONG_INLINE float round(float v) { return round_bf16(v); }
};

// ---------------------------------------------------------------- RMSNorm

template <class IO>
FURLONG_INLINE void rms_forward_rows(const typename IO::S* x, const typename IO::S* w,
                                     typename IO::S* y, float* rstd, int64_t r0, int64_t r1,
                                     int64_t D, float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const auto* xr = x + r * D;
    auto* yr = y + r * D;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < D; ++i) {
      float v = IO::load(xr, i);
      acc += v * v;
    }
    float inv = 1.0f / std::sqrt(acc / static_cast<float>(D) + eps);
    rstd[r] = inv;
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) {
      float normed = IO::round(IO::load(xr, i) * inv);
      yr[i] = IO::make(IO::load(w, i) * normed);
    }
  }
}

template <class IO>
FURLONG_INLINE void rms_backward_rows(const typename IO::S* dy, const typename IO::S* x,
                                      const typename IO::S* w, const float* rstd,
                                      typename IO::S* dx, float* dw, int64_t r0, int64_t r1,
                                      int64_t D) {
  for (int64_t r = r0; r < r1; ++r) {
    const auto* dyr = dy + r * D;
    const auto* xr = x + r * D;
    auto* dxr = dx + r * D;
    float inv = rstd[r];
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t i = 0; i < D; ++i) dot += IO::load(dyr, i) * IO::load(w, i) * IO::load(xr, i);
    float coef = dot * inv * inv * inv / static_cast<float>(D);
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) {
      float xv = IO::load(xr, i), g = IO::load(dyr, i);
      dxr[i] = IO::make(g * IO::load(w, i) * inv - xv * coef);
      dw[i] += g * IO::round(xv * inv);
    }
  }
}

FURLONG_KERNEL void rms_forward_f32(const float* x, const float* w, float* y, float* rstd,
                                    int64_t r0, int64_t r1, int64_t D, float eps) {
  rms_forward_rows<F32>(x, w, y, rstd, r0, r1, D, eps);
}
FURLONG_KERNEL void rms_forward_bf16(const uint16_t* x, const uint16_t* w, uint16_t* y, float* rstd,
                                     int64_t r0, int64_t r1, int64_t D, float eps) {
  rms_forward_rows<BF16>(x, w, y, rstd, r0, r1, D, eps);
}
FURLONG_KERNEL void rms_backward_f32(const float* dy, const float* x, const float* w,
                                     const float* rstd, float* dx, float* dw, int64_t r0,
                                     int64_t r1, int64_t D) {
  rms_backward_rows<F32>(dy, x, w, rstd, dx, dw, r0, r1, D);
}
FURLONG_KERNEL void rms_backward_bf16(const uint16_t* dy, const uint16_t* x, const uint16_t* w,
                                      const float* rstd, uint16_t* dx, float* dw, int64_t r0,
                                      int64_t r1, int64_t D) {
  rms_backward_rows<BF16>(dy, x, w, rstd, dx, dw, r0, r1, D);
}

// ---------------------------------------------------------------- RoPE

// Row r = (t, n); cos/sin row t. For j < H/2: y_j = x_j c_j - x_{j+h} s_j,
// y_{j+h} = x_{j+h} c_{j+h} + x_j s_{j+h}; bf16 rounds each product and the sum (transformers'
// q * cos + rotate_half(q) * sin in bf16).
template <class IO>
FURLONG_INLINE void rope_forward_rows(const typename IO::S* x, const typename IO::S* cos,
                                      const typename IO::S* sin, typename IO::S* y, int64_t r0,
                                      int64_t r1, int64_t N, int64_t H) {
  const int64_t h = H / 2;
  for (int64_t r = r0; r < r1; ++r) {
    const auto* xr = x + r * H;
    const auto* c = cos + (r / N) * H;
    const auto* s = sin + (r / N) * H;
    auto* yr = y + r * H;
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) {
      float a = IO::load(xr, j), b = IO::load(xr, j + h);
      float lo = IO::round(a * IO::load(c, j)) + IO::round(-b * IO::load(s, j));
      float hi = IO::round(b * IO::load(c, j + h)) + IO::round(a * IO::load(s, j + h));
      yr[j] = IO::make(lo);
      yr[j + h] = IO::make(hi);
    }
  }
}

template <class IO>
FURLONG_INLINE void rope_backward_rows(const typename IO::S* dy, const typename IO::S* cos,
                                       const typename IO::S* sin, typename IO::S* dx, int64_t r0,
                                       int64_t r1, int64_t N, int64_t H) {
  const int64_t h = H / 2;
  for (int64_t r = r0; r < r1; ++r) {
    const auto* g = dy + r * H;
    const auto* c = cos + (r / N) * H;
    const auto* s = sin + (r / N) * H;
    auto* dxr = dx + r * H;
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) {
      float ga = IO::load(g, j), gb = IO::load(g, j + h);
      dxr[j] = IO::make(ga * IO::load(c, j) + gb * IO::load(s, j + h));
      dxr[j + h] = IO::make(gb * IO::load(c, j + h) - ga * IO::load(s, j));
    }
  }
}

FURLONG_KERNEL void rope_forward_f32(const float* x, const float* c, const float* s, float* y,
                                     int64_t r0, int64_t r1, int64_t N, int64_t H) {
  rope_forward_rows<F32>(x, c, s, y, r0, r1, N, H);
}
FURLONG_KERNEL void rope_forward_bf16(const uint16_t* x, const uint16_t* c, const uint16_t* s,
                                      uint16_t* y, int64_t r0, int64_t r1, int64_t N, int64_t H) {
  rope_forward_rows<BF16>(x, c, s, y, r0, r1, N, H);
}
FURLONG_KERNEL void rope_backward_f32(const float* dy, const float* c, const float* s, float* dx,
                                      int64_t r0, int64_t r1, int64_t N, int64_t H) {
  rope_backward_rows<F32>(dy, c, s, dx, r0, r1, N, H);
}
FURLONG_KERNEL void rope_backward_bf16(const uint16_t* dy, const uint16_t* c, const uint16_t* s,
                                       uint16_t* dx, int64_t r0, int64_t r1, int64_t N, int64_t H) {
  rope_backward_rows<BF16>(dy, c, s, dx, r0, r1, N, H);
}

// ---------------------------------------------------------------- SwiGLU

template <class IO>
FURLONG_INLINE void swiglu_forward_range(const typename IO::S* g, const typename IO::S* u,
                                         typename IO::S* out, int64_t i0, int64_t i1) {
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) {
    float gv = IO::load(g, i);
    float silu = IO::round(gv / (1.0f + fast_exp(-gv)));
    out[i] = IO::make(silu * IO::load(u, i));
  }
}

template <class IO>
FURLONG_INLINE void swiglu_backward_range(const typename IO::S* dh, const typename IO::S* g,
                                          const typename IO::S* u, typename IO::S* dg,
                                          typename IO::S* du, int64_t i0, int64_t i1) {
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) {
    float gv = IO::load(g, i), d = IO::load(dh, i);
    float sig = 1.0f / (1.0f + fast_exp(-gv));
    float dsilu = sig * (1.0f + gv * (1.0f - sig));
    dg[i] = IO::make(d * IO::load(u, i) * dsilu);
    du[i] = IO::make(d * gv * sig);
  }
}

FURLONG_KERNEL void swiglu_forward_f32(const float* g, const float* u, float* out, int64_t i0,
                                       int64_t i1) {
  swiglu_forward_range<F32>(g, u, out, i0, i1);
}
FURLONG_KERNEL void swiglu_forward_bf16(const uint16_t* g, const uint16_t* u, uint16_t* out,
                                        int64_t i0, int64_t i1) {
  swiglu_forward_range<BF16>(g, u, out, i0, i1);
}
FURLONG_KERNEL void swiglu_backward_f32(const float* dh, const float* g, const float* u, float* dg,
                                        float* du, int64_t i0, int64_t i1) {
  swiglu_backward_range<F32>(dh, g, u, dg, du, i0, i1);
}
FURLONG_KERNEL void swiglu_backward_bf16(const uint16_t* dh, const uint16_t* g, const uint16_t* u,
                                         uint16_t* dg, uint16_t* du, int64_t i0, int64_t i1) {
  swiglu_backward_range<BF16>(dh, g, u, dg, du, i0, i1);
}

// ---------------------------------------------------------------- softmax statistics

template <class IO>
FURLONG_INLINE void softmax_stats_rows(const typename IO::S* logits, const int64_t* targets,
                                       float temperature, float* max_out, float* log_sum_out,
                                       float* logprob_out, float* entropy_out, int64_t r0,
                                       int64_t r1, int64_t V) {
  for (int64_t r = r0; r < r1; ++r) {
    const auto* lr = logits + r * V;
    float m = -__builtin_inff();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < V; ++j) m = std::max(m, IO::load(lr, j) / temperature);
    float s = 0.0f, t = 0.0f;
#pragma omp simd reduction(+ : s, t)
    for (int64_t j = 0; j < V; ++j) {
      float zs = IO::load(lr, j) / temperature - m;
      float e = fast_exp(zs);
      s += e;
      t += e * zs;
    }
    float log_s = std::log(s);
    max_out[r] = m;
    log_sum_out[r] = log_s;
    logprob_out[r] = (IO::load(lr, targets[r]) / temperature - m) - log_s;
    if (entropy_out != nullptr) entropy_out[r] = log_s - t / s;
  }
}

template <class IO>
FURLONG_INLINE void softmax_grad_rows(const typename IO::S* logits, const int64_t* targets,
                                      float temperature, const float* max_in,
                                      const float* log_sum_in, const float* entropy_in,
                                      const float* grad_lp, const float* grad_ent,
                                      typename IO::S* grad_out, int64_t r0, int64_t r1, int64_t V) {
  for (int64_t r = r0; r < r1; ++r) {
    const auto* lr = logits + r * V;
    auto* gr = grad_out + r * V;
    float shift = max_in[r] + log_sum_in[r];
    float gl = grad_lp ? grad_lp[r] : 0.0f;
    float ge = grad_ent ? grad_ent[r] : 0.0f;
    float H = entropy_in ? entropy_in[r] : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) {
      float log_p = IO::load(lr, j) / temperature - shift;
      float p = fast_exp(log_p);
      gr[j] = IO::make((-gl * p - ge * p * (log_p + H)) / temperature);
    }
    int64_t t = targets[r];
    float log_pt = IO::load(lr, t) / temperature - shift;
    float pt = std::exp(log_pt);
    gr[t] = IO::make((gl * (1.0f - pt) - ge * pt * (log_pt + H)) / temperature);
  }
}

FURLONG_KERNEL void softmax_stats_f32(const float* l, const int64_t* t, float temp, float* m,
                                      float* ls, float* lp, float* ent, int64_t r0, int64_t r1,
                                      int64_t V) {
  softmax_stats_rows<F32>(l, t, temp, m, ls, lp, ent, r0, r1, V);
}
FURLONG_KERNEL void softmax_stats_bf16(const uint16_t* l, const int64_t* t, float temp, float* m,
                                       float* ls, float* lp, float* ent, int64_t r0, int64_t r1,
                                       int64_t V) {
  softmax_stats_rows<BF16>(l, t, temp, m, ls, lp, ent, r0, r1, V);
}
FURLONG_KERNEL void softmax_grad_f32(const float* l, const int64_t* t, float temp, const float* m,
                                     const float* ls, const float* ent, const float* gl,
                                     const float* ge, float* out, int64_t r0, int64_t r1,
                                     int64_t V) {
  softmax_grad_rows<F32>(l, t, temp, m, ls, ent, gl, ge, out, r0, r1, V);
}
FURLONG_KERNEL void softmax_grad_bf16(const uint16_t* l, const int64_t* t, float temp,
                                      const float* m, const float* ls, const float* ent,
                                      const float* gl, const float* ge, uint16_t* out, int64_t r0,
                                      int64_t r1, int64_t V) {
  softmax_grad_rows<BF16>(l, t, temp, m, ls, ent, gl, ge, out, r0, r1, V);
}

// ---------------------------------------------------------------- helpers

bool is_bf16(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16;
}

template <typename T>
T* ptr(const at::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// Rows per task so that each task touches at least ~16K elements.
int64_t grain_rows(int64_t width) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1));
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  FURLONG_ASSERT(supported(a) && a.scalar_type() == b.scalar_type(), what,
                 ": unsupported or mismatched dtypes ", a.scalar_type(), " / ", b.scalar_type());
}

}  // namespace

bool supported(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

std::pair<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x_in, const at::Tensor& w_D,
                                                   double eps) {
  check_same(x_in, w_D, "rms_norm_forward");
  auto x = x_in.contiguous();
  auto w = w_D.contiguous();
  const int64_t D = x.size(-1), R = x.numel() / std::max<int64_t>(D, 1);
  auto y = at::empty_like(x);
  auto rstd = at::empty({R}, x.options().dtype(at::kFloat));
  float e = static_cast<float>(eps);
  at::parallel_for(0, R, grain_rows(D), [&](int64_t r0, int64_t r1) {
    if (is_bf16(x)) {
      rms_forward_bf16(ptr<uint16_t>(x), ptr<uint16_t>(w), ptr<uint16_t>(y), ptr<float>(rstd), r0,
                       r1, D, e);
    } else {
      rms_forward_f32(ptr<float>(x), ptr<float>(w), ptr<float>(y), ptr<float>(rstd), r0, r1, D, e);
    }
  });
  return {y, rstd};
}

std::pair<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy_in, const at::Tensor& x_in,
                                                    const at::Tensor& w_D,
                                                    const at::Tensor& rstd_R) {
  check_same(x_in, w_D, "rms_norm_backward");
  auto x = x_in.contiguous();
  auto dy = dy_in.to(x.scalar_type()).contiguous();
  auto w = w_D.contiguous();
  const int64_t D = x.size(-1), R = x.numel() / std::max<int64_t>(D, 1);
  auto dx = at::empty_like(x);
  // One fp32 partial dw per task (fixed chunking so each task owns its buffer), summed after.
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), R));
  const int64_t rows_per_task = (R + tasks - 1) / tasks;
  auto partial = at::zeros({tasks, D}, x.options().dtype(at::kFloat));
  at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t r0 = t * rows_per_task, r1 = std::min(R, r0 + rows_per_task);
      float* dw = ptr<float>(partial) + t * D;
      if (r0 >= r1) continue;
      if (is_bf16(x)) {
        rms_backward_bf16(ptr<uint16_t>(dy), ptr<uint16_t>(x), ptr<uint16_t>(w), ptr<float>(rstd_R),
                          ptr<uint16_t>(dx), dw, r0, r1, D);
      } else {
        rms_backward_f32(ptr<float>(dy), ptr<float>(x), ptr<float>(w), ptr<float>(rstd_R),
                         ptr<float>(dx), dw, r0, r1, D);
      }
    }
  });
  return {dx, partial.sum(0)};
}

at::Tensor rope_forward(const at::Tensor& x_in, const at::Tensor& cos_PH,
                        const at::Tensor& sin_PH) {
  check_same(x_in, cos_PH, "rope_forward");
  auto x = x_in.contiguous();
  auto c = cos_PH.contiguous(), s = sin_PH.contiguous();
  const int64_t N = x.size(1), H = x.size(2), R = x.size(0) * N;
  auto y = at::empty_like(x);
  at::parallel_for(0, R, grain_rows(H), [&](int64_t r0, int64_t r1) {
    if (is_bf16(x)) {
      rope_forward_bf16(ptr<uint16_t>(x), ptr<uint16_t>(c), ptr<uint16_t>(s), ptr<uint16_t>(y), r0,
                        r1, N, H);
    } else {
      rope_forward_f32(ptr<float>(x), ptr<float>(c), ptr<float>(s), ptr<float>(y), r0, r1, N, H);
    }
  });
  return y;
}

at::Tensor rope_backward(const at::Tensor& dy_in, const at::Tensor& cos_PH,
                         const at::Tensor& sin_PH) {
  auto c = cos_PH.contiguous(), s = sin_PH.contiguous();
  auto dy = dy_in.to(c.scalar_type()).contiguous();
  const int64_t N = dy.size(1), H = dy.size(2), R = dy.size(0) * N;
  auto dx = at::empty_like(dy);
  at::parallel_for(0, R, grain_rows(H), [&](int64_t r0, int64_t r1) {
    if (is_bf16(dy)) {
      rope_backward_bf16(ptr<uint16_t>(dy), ptr<uint16_t>(c), ptr<uint16_t>(s), ptr<uint16_t>(dx),
                         r0, r1, N, H);
    } else {
      rope_backward_f32(ptr<float>(dy), ptr<float>(c), ptr<float>(s), ptr<float>(dx), r0, r1, N, H);
    }
  });
  return dx;
}

at::Tensor swiglu_forward(const at::Tensor& gate_in, const at::Tensor& up_in) {
  check_same(gate_in, up_in, "swiglu_forward");
  auto g = gate_in.contiguous(), u = up_in.contiguous();
  auto out = at::empty_like(g);
  at::parallel_for(0, g.numel(), 16384, [&](int64_t i0, int64_t i1) {
    if (is_bf16(g)) {
      swiglu_forward_bf16(ptr<uint16_t>(g), ptr<uint16_t>(u), ptr<uint16_t>(out), i0, i1);
    } else {
      swiglu_forward_f32(ptr<float>(g), ptr<float>(u), ptr<float>(out), i0, i1);
    }
  });
  return out;
}

std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dh_in,
                                                  const at::Tensor& gate_in,
                                                  const at::Tensor& up_in) {
  auto g = gate_in.contiguous(), u = up_in.contiguous();
  auto dh = dh_in.to(g.scalar_type()).contiguous();
  auto dg = at::empty_like(g), du = at::empty_like(u);
  at::parallel_for(0, g.numel(), 16384, [&](int64_t i0, int64_t i1) {
    if (is_bf16(g)) {
      swiglu_backward_bf16(ptr<uint16_t>(dh), ptr<uint16_t>(g), ptr<uint16_t>(u), ptr<uint16_t>(dg),
                           ptr<uint16_t>(du), i0, i1);
    } else {
      swiglu_backward_f32(ptr<float>(dh), ptr<float>(g), ptr<float>(u), ptr<float>(dg),
                          ptr<float>(du), i0, i1);
    }
  });
  return {dg, du};
}

SoftmaxStats softmax_stats(const at::Tensor& logits_in, const at::Tensor& targets_in,
                           double temperature, bool with_entropy) {
  FURLONG_ASSERT(supported(logits_in), "softmax_stats: unsupported logits");
  auto logits = logits_in.contiguous();
  auto targets = targets_in.to(at::kLong).contiguous();
  const int64_t R = logits.size(0), V = logits.size(1);
  auto f32 = logits.options().dtype(at::kFloat);
  SoftmaxStats st{at::empty({R}, f32), at::empty({R}, f32), at::empty({R}, f32),
                  with_entropy ? at::empty({R}, f32) : at::Tensor()};
  float temp = static_cast<float>(temperature);
  float* ent = with_entropy ? ptr<float>(st.entropy_R) : nullptr;
  at::parallel_for(0, R, grain_rows(V), [&](int64_t r0, int64_t r1) {
    if (is_bf16(logits)) {
      softmax_stats_bf16(ptr<uint16_t>(logits), ptr<int64_t>(targets), temp, ptr<float>(st.max_R),
                         ptr<float>(st.log_sum_R), ptr<float>(st.logprob_R), ent, r0, r1, V);
    } else {
      softmax_stats_f32(ptr<float>(logits), ptr<int64_t>(targets), temp, ptr<float>(st.max_R),
                        ptr<float>(st.log_sum_R), ptr<float>(st.logprob_R), ent, r0, r1, V);
    }
  });
  return st;
}

at::Tensor softmax_stats_backward(const at::Tensor& logits_in, const at::Tensor& targets_in,
                                  double temperature, const SoftmaxStats& st,
                                  const at::Tensor& grad_logprob_R,
                                  const at::Tensor& grad_entropy_R) {
  auto logits = logits_in.contiguous();
  auto targets = targets_in.to(at::kLong).contiguous();
  const int64_t R = logits.size(0), V = logits.size(1);
  auto as_f32 = [](const at::Tensor& t) {
    return t.defined() ? t.to(at::kFloat).contiguous() : at::Tensor();
  };
  auto gl = as_f32(grad_logprob_R), ge = as_f32(grad_entropy_R);
  const float* gl_p = gl.defined() ? ptr<float>(gl) : nullptr;
  const float* ge_p = ge.defined() ? ptr<float>(ge) : nullptr;
  const float* ent = st.entropy_R.defined() ? ptr<float>(st.entropy_R) : nullptr;
  FURLONG_ASSERT(ge_p == nullptr || ent != nullptr, "entropy gradient without entropy");
  auto grad = at::empty_like(logits);
  float temp = static_cast<float>(temperature);
  at::parallel_for(0, R, grain_rows(V), [&](int64_t r0, int64_t r1) {
    if (is_bf16(logits)) {
      softmax_grad_bf16(ptr<uint16_t>(logits), ptr<int64_t>(targets), temp, ptr<float>(st.max_R),
                        ptr<float>(st.log_sum_R), ent, gl_p, ge_p, ptr<uint16_t>(grad), r0, r1, V);
    } else {
      softmax_grad_f32(ptr<float>(logits), ptr<int64_t>(targets), temp, ptr<float>(st.max_R),
                       ptr<float>(st.log_sum_R), ent, gl_p, ge_p, ptr<float>(grad), r0, r1, V);
    }
  });
  return grad;
}

}  // namespace furlong::kernels
