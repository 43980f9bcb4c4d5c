# Third-party dependencies come from Debian packages (scripts/setup.sh installs them).
#
# FURLONG_DEPS_PREFIX (unset for the normal build): a folder holding those packages unpacked
# with `dpkg -x` (its usr/ mirrors /usr), for a machine where they cannot be installed (the GPU
# machine of scripts/device_check.sh). CMake then looks there first: config packages through
# CMAKE_PREFIX_PATH, pkg-config files only there (PKG_CONFIG_LIBDIR, with PKG_CONFIG_SYSROOT_DIR
# so their /usr paths point into the prefix) with the carried pkgconf, and headers found by path
# alone (gloo's) through one system include directory. Programs built so need
# <prefix>/usr/lib/<arch> on LD_LIBRARY_PATH at run time (the carried shared libraries).
set(FURLONG_DEPS_PREFIX "" CACHE PATH "Debian packages unpacked with dpkg -x (empty: the system's)")
if(FURLONG_DEPS_PREFIX)
  get_filename_component(_deps "${FURLONG_DEPS_PREFIX}" ABSOLUTE)
  if(NOT EXISTS "${_deps}/usr/include")
    message(FATAL_ERROR "furlong: FURLONG_DEPS_PREFIX=${_deps} holds no usr/include; unpack the "
                        "packages there first (scripts/device_check.sh does).")
  endif()
  set(_deps_lib "${_deps}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
  list(PREPEND CMAKE_PREFIX_PATH "${_deps}/usr")
  set(ENV{PKG_CONFIG_LIBDIR} "${_deps_lib}/pkgconfig:${_deps}/usr/share/pkgconfig")
  set(ENV{PKG_CONFIG_SYSROOT_DIR} "${_deps}")
  set(ENV{LD_LIBRARY_PATH} "${_deps_lib}:$ENV{LD_LIBRARY_PATH}")  # the carried pkgconf's library
  if(NOT PKG_CONFIG_EXECUTABLE)
    find_program(PKG_CONFIG_EXECUTABLE NAMES pkgconf pkg-config HINTS "${_deps}/usr/bin"
                 NO_DEFAULT_PATH)
  endif()
  include_directories(SYSTEM "${_deps}/usr/include")
  message(STATUS "furlong: dependencies from ${_deps} (libraries in ${_deps_lib})")
endif()
find_package(nlohmann_json 3.11 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
find_package(Threads REQUIRED)
if(FURLONG_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(FURLONG_BUILD_BENCH)
  find_package(benchmark QUIET)
endif()
