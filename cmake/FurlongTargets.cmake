# Helpers that give every furlong target the same flags.
#
#   furlong_library(<layer> SOURCES ... DEPS <lower layers and packages>)
#     defines static library furlong_<layer>; include paths are rooted at src/.
#   furlong_executable(<name> SOURCES ... DEPS ...)

# GCC 12 reports false positives from inlined libstdc++ string code under -O2
# (array-bounds, restrict, stringop-overflow/overread; GCC bugs 105329, 105651); they are silenced.
set(FURLONG_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter
    -Wno-array-bounds -Wno-restrict -Wno-stringop-overflow -Wno-stringop-overread)

# One precompiled header shared by every target (they all use the same flags).
set(FURLONG_PCH_HEADERS <ATen/ATen.h> <c10/util/Exception.h> <nlohmann/json.hpp>
    <string> <vector> <memory> <unordered_map> <functional> <optional> <sstream>)

function(_furlong_common target)
  target_compile_options(${target} PRIVATE ${FURLONG_WARNINGS})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  if(FURLONG_USE_PCH)
    if(TARGET furlong_pch)
      target_precompile_headers(${target} REUSE_FROM furlong_pch)
    endif()
  endif()
endfunction()

function(furlong_library layer)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(furlong_${layer} STATIC ${ARG_SOURCES})
  _furlong_common(furlong_${layer})
  target_link_libraries(furlong_${layer} PUBLIC ${ARG_DEPS})
endfunction()

function(furlong_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  _furlong_common(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()
