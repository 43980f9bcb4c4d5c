# Helpers that give every furlong target the same flags, and the layering rule.
#
#   furlong_library(<name> SOURCES ... DEPS <lower furlong libraries and packages>)
#     defines static library furlong_<name> from the sources of the current folder.
#   furlong_executable(<name> SOURCES ... DEPS ...)
#     a program (furlong itself, tests, benchmarks); it may include any header under src/.
#
# The layering rule, stated once: a library's sources may include the headers of its own folder
# and of the furlong libraries in its DEPS, transitively, and nothing else. The build enforces
# it: each library compiles against its own include root, build/layers/<name>/, which holds
# links to exactly those headers, so an upward include ("models" including "dist/mesh.h")
# fails with "No such file or directory". A sub-folder that is its own library
# (engine/server, tokenizer/jinja) is a separate entry: the parent folder's library does not
# see it. docs/architecture.md draws the same graph.

# GCC 12 reports false positives from inlined libstdc++ string code under -O2
# (array-bounds, restrict, stringop-overflow/overread; GCC bugs 105329, 105651); they are silenced.
set(FURLONG_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter
    -Wno-array-bounds -Wno-restrict -Wno-stringop-overflow -Wno-stringop-overread)

# One precompiled header shared by every target (they all use the same flags).
set(FURLONG_PCH_HEADERS <ATen/ATen.h> <c10/util/Exception.h> <nlohmann/json.hpp>
    <string> <vector> <memory> <unordered_map> <functional> <optional> <sstream>)

function(_furlong_flags target)
  target_compile_options(${target} PRIVATE ${FURLONG_WARNINGS})
  if(FURLONG_USE_PCH)
    if(TARGET furlong_pch)
      target_precompile_headers(${target} REUSE_FROM furlong_pch)
    endif()
  endif()
endfunction()

# Programs and test helpers: the whole of src/ is visible.
function(_furlong_common target)
  _furlong_flags(${target})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src)
endfunction()

# Fills build/layers/<name>/ with links to the headers of the folders in `dirs` (paths under
# src/), and returns it.
function(_furlong_include_root name dirs out_var)
  set(root ${PROJECT_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${root})
  foreach(dir IN LISTS dirs)
    file(GLOB headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${dir}/*.h)
    file(MAKE_DIRECTORY ${root}/${dir})
    foreach(header IN LISTS headers)
      get_filename_component(file_name ${header} NAME)
      file(CREATE_LINK ${header} ${root}/${dir}/${file_name} SYMBOLIC)
    endforeach()
  endforeach()
  set(${out_var} ${root} PARENT_SCOPE)
endfunction()

function(furlong_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(furlong_${name} STATIC ${ARG_SOURCES})
  _furlong_flags(furlong_${name})
  target_link_libraries(furlong_${name} PUBLIC ${ARG_DEPS})
  # The folders this library sees: its own, and what its furlong DEPS see.
  file(RELATIVE_PATH own_dir ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
  set(visible ${own_dir})
  foreach(dep IN LISTS ARG_DEPS)
    if(dep MATCHES "^furlong_")
      if(NOT TARGET ${dep})
        message(FATAL_ERROR "furlong_library(${name}): DEPS names ${dep}, which is not defined "
                            "yet; a library may only depend on libraries defined before it "
                            "(see the add_subdirectory order in src/CMakeLists.txt)")
      endif()
      get_target_property(dep_visible ${dep} FURLONG_VISIBLE_DIRS)
      list(APPEND visible ${dep_visible})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES visible)
  set_target_properties(furlong_${name} PROPERTIES FURLONG_VISIBLE_DIRS "${visible}")
  _furlong_include_root(${name} "${visible}" root)
  target_include_directories(furlong_${name} PRIVATE ${root})
endfunction()

function(furlong_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  _furlong_common(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()
