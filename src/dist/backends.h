// Internal to src/dist: the factories that construct c10d backends. Each backend's header is
// included by exactly one translation unit (gloo_backend.cpp, nccl_backend.cpp); everything else
// holds the result as a c10d::Backend. Not installed, not for other layers.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace furlong::dist::detail {

// A ProcessGroupGloo over `store` (already scoped to the group by a PrefixStore). Blocks until all
// `size` members have connected. `master_addr` selects the transport address: loopback when the
// run is on one host, else this host's address on the route to it (GLOO_SOCKET_IFNAME, when
// set, names the interface instead).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& master_addr);

// True when this build compiled the NCCL path (FURLONG_WITH_NCCL, a CUDA libtorch).
bool nccl_compiled();
// Number of visible CUDA devices (0 in CPU builds).
int cuda_device_count();
// Makes `index` the current CUDA device of this process (NCCL builds only).
void set_cuda_device(int index);
// A ProcessGroupNCCL over `store`; communicators are created lazily by the first collective.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout);

}  // namespace furlong::dist::detail
