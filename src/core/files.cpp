#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace furlong {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  FURLONG_CHECK(in.good(), path.string(), ": cannot open for reading (", std::strerror(errno), ")");
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  FURLONG_CHECK(!in.bad(), path.string(), ": read error");
  return data;
}

void write_file_atomic(const std::filesystem::path& path, const std::string& content) {
  std::random_device rd;
  auto tmp = path;
  tmp += ".tmp." + std::to_string(getpid()) + "." + std::to_string(rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FURLONG_CHECK(fd >= 0, tmp.string(), ": cannot create (", std::strerror(errno), ")");
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      std::filesystem::remove(tmp);
      FURLONG_FAIL(tmp.string(), ": write failed (", std::strerror(err), ")");
    }
    written += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    FURLONG_FAIL(path.string(), ": cannot rename temporary file into place (", ec.message(), ")");
  }
}

void ensure_directory(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  FURLONG_CHECK(!ec, path.string(), ": cannot create directory (", ec.message(), ")");
}

std::string human_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), unit == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[unit]);
  return buf;
}

}  // namespace furlong
