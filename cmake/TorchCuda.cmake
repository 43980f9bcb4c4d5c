# Configuring against a CUDA build of torch (the GPU machine's, or .venv-cuda/ for CI's
# compile-only check). torch's CMake config needs a CUDA toolkit; this fills in what a plain
# toolkit install or the CUDA wheel leaves it to guess:
# - the toolkit root, from the real path of nvcc (a wrapper script in /usr/local/bin hides it);
# - TORCH_CUDA_ARCH_LIST (default 9.0, Hopper), so configuring never probes for a GPU (a
#   compile-only machine has none);
# - libraries and headers the toolkit lacks but the wheel ships (nvidia/cu<major>/{lib,include}:
#   nvrtc is there only as libnvrtc.so.<major>, cusparse.h and the other math headers only there
#   on a minimal toolkit).
if(NOT CUDA_TOOLKIT_ROOT_DIR)
  find_program(FURLONG_NVCC nvcc PATHS /usr/local/cuda/bin)
  if(FURLONG_NVCC)
    # Follow a wrapper script (`exec /usr/local/cuda-X/bin/nvcc`) to the toolkit it runs.
    file(STRINGS "${FURLONG_NVCC}" _nvcc_exec REGEX "^exec .*/bin/nvcc" LIMIT_COUNT 1)
    if(_nvcc_exec)
      string(REGEX REPLACE "^exec +([^ ]*)/bin/nvcc.*" "\\1" _cuda_root "${_nvcc_exec}")
    else()
      get_filename_component(_nvcc_real "${FURLONG_NVCC}" REALPATH)
      get_filename_component(_cuda_root "${_nvcc_real}/../.." ABSOLUTE)
    endif()
    set(CUDA_TOOLKIT_ROOT_DIR "${_cuda_root}" CACHE PATH "CUDA toolkit used with a CUDA torch")
  endif()
endif()
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
string(REGEX MATCH "^[0-9]+" _cuda_major "${FURLONG_TORCH_CUDA}")
get_filename_component(_site "${FURLONG_TORCH_DIR}/.." ABSOLUTE)
set(FURLONG_CUDA_WHEEL_DIR "${_site}/nvidia/cu${_cuda_major}")
if(EXISTS "${FURLONG_CUDA_WHEEL_DIR}/lib")
  if(NOT CUDA_nvrtc_LIBRARY AND NOT EXISTS "${CUDA_TOOLKIT_ROOT_DIR}/lib64/libnvrtc.so")
    file(GLOB _nvrtc "${FURLONG_CUDA_WHEEL_DIR}/lib/libnvrtc.so.${_cuda_major}")
    if(_nvrtc)
      set(CUDA_nvrtc_LIBRARY "${_nvrtc}" CACHE FILEPATH "nvrtc from the CUDA wheel")
    endif()
  endif()
  if(NOT EXISTS "${CUDA_TOOLKIT_ROOT_DIR}/include/cusparse.h" AND
     EXISTS "${FURLONG_CUDA_WHEEL_DIR}/include/cusparse.h")
    include_directories(SYSTEM "${FURLONG_CUDA_WHEEL_DIR}/include")
  endif()
endif()
message(STATUS "furlong: CUDA torch (CUDA ${FURLONG_TORCH_CUDA}); toolkit ${CUDA_TOOLKIT_ROOT_DIR}, "
               "TORCH_CUDA_ARCH_LIST $ENV{TORCH_CUDA_ARCH_LIST}")
