#include "kernels/causal_conv.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "core/error.h"

namespace furlong::kernels {
namespace {

void check(const at::Tensor& t, const char* what) {
  FURLONG_ASSERT(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(),
                 "causal conv: ", what, " must be fp32 contiguous on the CPU");
}

// Row t' of x~ (the window's W-1 columns, then x) of document b: a pointer to C floats, or the
// column of the window (stride W-1) copied into `col`.
struct Rows {
  const float* x;       // [B, T, C]
  const float* window;  // [B, C, W-1] or null
  int64_t T, C, W;
  // x~[b, t', :] for t' in [0, T + W - 1).
  const float* row(int64_t b, int64_t tp, float* col) const {
    if (tp >= W - 1) return x + (b * T + tp - (W - 1)) * C;
    if (window == nullptr) {
      for (int64_t c = 0; c < C; ++c) col[c] = 0.0f;
    } else {
      const float* w = window + b * C * (W - 1);
      for (int64_t c = 0; c < C; ++c) col[c] = w[c * (W - 1) + tp];
    }
    return col;
  }
};

}  // namespace

at::Tensor causal_conv_forward(const at::Tensor& x_BTC, const at::Tensor& w_CW,
                               const at::Tensor& window_BCW) {
  check(x_BTC, "x");
  check(w_CW, "w");
  if (window_BCW.defined()) check(window_BCW, "window");
  const int64_t B = x_BTC.size(0), T = x_BTC.size(1), C = x_BTC.size(2), W = w_CW.size(1);
  auto y_BTC = at::empty({B, T, C}, x_BTC.options());
  const Rows rows{x_BTC.data_ptr<float>(),
                  window_BCW.defined() ? window_BCW.data_ptr<float>() : nullptr, T, C, W};
  // w transposed to [W, C] so that each tap's weights are contiguous over channels.
  const auto wt_WC = w_CW.t().contiguous();
  const float* wt = wt_WC.data_ptr<float>();
  float* y = y_BTC.data_ptr<float>();
  at::parallel_for(0, B * T, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> col(static_cast<size_t>(C));
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      float* out = y + bt * C;
      const float* x0 = rows.row(b, t, col.data());
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) out[c] = x0[c] * wt[c];
      for (int64_t j = 1; j < W; ++j) {
        const float* xj = rows.row(b, t + j, col.data());
        const float* wj = wt + j * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) out[c] = out[c] + xj[c] * wj[c];
      }
    }
  });
  return y_BTC;
}

std::pair<at::Tensor, at::Tensor> causal_conv_backward(const at::Tensor& dy_BTC,
                                                       const at::Tensor& x_BTC,
                                                       const at::Tensor& w_CW,
                                                       const at::Tensor& window_BCW) {
  check(x_BTC, "x");
  check(w_CW, "w");
  auto dy = dy_BTC.to(at::kFloat).contiguous();
  if (window_BCW.defined()) check(window_BCW, "window");
  const int64_t B = x_BTC.size(0), T = x_BTC.size(1), C = x_BTC.size(2), W = w_CW.size(1);
  const auto wt_WC = w_CW.t().contiguous();
  const float* wt = wt_WC.data_ptr<float>();
  const float* g = dy.data_ptr<float>();
  // dx[b, t] = sum_j w[:, j] * dy[b, t + W-1 - j], the taps in order j = W-1..0 (the outputs
  // that read x[b, t]).
  auto dx_BTC = at::empty({B, T, C}, x_BTC.options());
  float* dx = dx_BTC.data_ptr<float>();
  at::parallel_for(0, B * T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      float* out = dx + bt * C;
      for (int64_t c = 0; c < C; ++c) out[c] = 0.0f;
      for (int64_t j = W - 1; j >= 0; --j) {
        const int64_t to = t + (W - 1) - j;  // the output that reads x[b, t] through tap j
        if (to >= T) continue;
        const float* gj = g + (b * T + to) * C;
        const float* wj = wt + j * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) out[c] = out[c] + gj[c] * wj[c];
      }
    }
  });
  // dw[c, j] = sum_{b, t} dy[b, t, c] x~[b, t + j, c], over channel blocks.
  auto dw_WC = at::zeros({W, C}, x_BTC.options());
  float* dw = dw_WC.data_ptr<float>();
  const Rows rows{x_BTC.data_ptr<float>(),
                  window_BCW.defined() ? window_BCW.data_ptr<float>() : nullptr, T, C, W};
  constexpr int64_t kBlock = 64;
  at::parallel_for(0, (C + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> col(static_cast<size_t>(C));
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < T; ++t) {
          const float* gt = g + (b * T + t) * C;
          for (int64_t j = 0; j < W; ++j) {
            const float* xj = rows.row(b, t + j, col.data());
            float* dwj = dw + j * C;
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) dwj[c] = dwj[c] + gt[c] * xj[c];
          }
        }
      }
    }
  });
  return {dx_BTC, dw_WC.t().contiguous()};
}

}  // namespace furlong::kernels
