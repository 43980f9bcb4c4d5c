#include "core/error.h"

namespace furlong::detail {

void throw_error(std::string message) {
  throw Error(std::move(message));
}

void throw_internal(const char* file, int line, const char* cond, std::string message) {
  std::ostringstream os;
  os << "internal error (a furlong bug, please report it): " << message << " [" << cond << " at "
     << file << ":" << line << "]";
  throw Error(os.str());
}

}  // namespace furlong::detail
