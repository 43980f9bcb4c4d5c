// The one translation unit that includes ProcessGroupGloo.hpp.
//
// The torch wheel does not ship gloo's headers; Debian's libgloo-dev provides declarations that
// satisfy ProcessGroupGloo.hpp (see docs/build.md). We only name gloo types through torch's own
// API (the transport device is an opaque shared_ptr created inside libtorch), never instantiate
// gloo classes, and never link libgloo.so: every gloo symbol resolves to the copy in libtorch.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>
#include <string>

#include "dist/backends.h"

namespace furlong::dist::detail {
namespace {

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

// The address gloo listens on: the loopback device for a single-host run, the named interface
// when GLOO_SOCKET_IFNAME is set (as torch.distributed honours it), else this host's name.
std::shared_ptr<::gloo::transport::Device> transport_device(const std::string& master_addr) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    std::string first(ifname);
    first = first.substr(0, first.find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  if (is_loopback(master_addr)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& master_addr) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(transport_device(master_addr));
  c10::intrusive_ptr<c10d::Backend> backend =
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  return backend;
}

}  // namespace furlong::dist::detail
