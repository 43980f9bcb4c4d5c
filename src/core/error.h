// Errors: the one exception type furlong throws, and the CHECK macros that build it.
//
// FURLONG_CHECK is for conditions that depend on input (files, flags, requests): its message
// must say what was wrong and where (file, field, flag) and what was expected, because it is
// what a user reads. FURLONG_ASSERT is for internal invariants: a failure is a furlong bug, and
// its message carries the source location. Library code never calls exit(); the app layer
// catches furlong::Error, prints it and exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace furlong {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(std::string message);
[[noreturn]] void throw_internal(const char* file, int line, const char* cond, std::string message);
}  // namespace detail

}  // namespace furlong

#define FURLONG_CHECK(cond, ...)                                              \
  do {                                                                        \
    if (!(cond)) [[unlikely]] {                                               \
      ::furlong::detail::throw_error(::furlong::detail::concat(__VA_ARGS__)); \
    }                                                                         \
  } while (0)

#define FURLONG_FAIL(...) ::furlong::detail::throw_error(::furlong::detail::concat(__VA_ARGS__))

#define FURLONG_ASSERT(cond, ...)                                                \
  do {                                                                           \
    if (!(cond)) [[unlikely]] {                                                  \
      ::furlong::detail::throw_internal(__FILE__, __LINE__, #cond,               \
                                        ::furlong::detail::concat(__VA_ARGS__)); \
    }                                                                            \
  } while (0)
