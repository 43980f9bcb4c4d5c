#pragma once
// The shared main() of the C++ benchmark binaries: furlong's host-memory policy first (as in
// build/furlong), then the benchmark, with any error printed as "<name>: <what>" and exit 1.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/host_memory.h"

namespace furlong {

inline int bench_main(const char* name, int argc, char** argv,
                      int (*run)(const std::vector<std::string>&)) {
  configure_host_memory();  // before any tensor exists
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace furlong
