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
#include "dist/net_addr.h"

namespace furlong::dist::detail {
namespace {

// The address gloo listens on and tells its peers: the interface GLOO_SOCKET_IFNAME names
// (its first entry, as torch.distributed reads it), else the loopback device when the
// rendezvous is on loopback (a single-host run), else this host's address on the route to
// MASTER_ADDR, so ranks on other hosts can connect back (a host name that resolves to another
// interface, or to nothing, does not matter).
std::shared_ptr<::gloo::transport::Device> transport_device(const std::string& master_addr) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    std::string first(ifname);
    first = first.substr(0, first.find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  return c10d::ProcessGroupGloo::createDeviceForHostname(local_address_towards(master_addr));
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
