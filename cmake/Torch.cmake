# libtorch comes from the pinned PyTorch wheel in the project venv (.venv/), never from the
# system. FURLONG_PYTHON may point at another interpreter with torch installed (the GPU
# machine keeps its CUDA wheel elsewhere).
set(FURLONG_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python interpreter whose torch package provides libtorch")
if(NOT EXISTS "${FURLONG_PYTHON}")
  message(FATAL_ERROR "furlong: ${FURLONG_PYTHON} not found. Run `make setup` first "
                      "(or pass -DFURLONG_PYTHON=/path/to/python with torch installed).")
endif()
execute_process(
  COMMAND "${FURLONG_PYTHON}" -c "import torch,os;print(torch.utils.cmake_prefix_path);print(os.path.dirname(torch.__file__));print(torch.__version__);print(torch.version.cuda or '')"
  OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc
  ERROR_QUIET)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "furlong: `${FURLONG_PYTHON} -c 'import torch'` failed; run `make setup`.")
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 _torch_cmake_prefix)
list(GET _torch_info 1 FURLONG_TORCH_DIR)
list(GET _torch_info 2 FURLONG_TORCH_VERSION)
list(LENGTH _torch_info _torch_info_len)
set(FURLONG_TORCH_CUDA "")
if(_torch_info_len GREATER 3)
  list(GET _torch_info 3 FURLONG_TORCH_CUDA)
endif()
list(APPEND CMAKE_PREFIX_PATH "${_torch_cmake_prefix}")
if(FURLONG_TORCH_CUDA)
  include(${CMAKE_CURRENT_LIST_DIR}/TorchCuda.cmake)
endif()
# TorchConfig warns about a missing kineto on CPU wheels; it is harmless.
find_package(Torch REQUIRED)
message(STATUS "furlong: libtorch ${FURLONG_TORCH_VERSION} from ${FURLONG_TORCH_DIR}")
set(FURLONG_TORCH_LIB_DIR "${FURLONG_TORCH_DIR}/lib")
# Our binaries find libtorch where the wheel keeps it.
set(CMAKE_BUILD_RPATH "${FURLONG_TORCH_LIB_DIR}")
set(CMAKE_INSTALL_RPATH "${FURLONG_TORCH_LIB_DIR}")
