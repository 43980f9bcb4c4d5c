#include <ATen/ATen.h>
#include <cstdio>
#include "core/log.h"
int main() {
  auto t = at::ones({2, 2});
  LOG_INFO("sum=", t.sum().item<float>());
  return 0;
}
