#!/usr/bin/env bash
# Fetches, as .debs (apt-get download; nothing is installed), the Debian packages furlong builds
# with that the GPU machine's image lacks, into one folder (default .device-debs/, ignored by git)
# that a device run carries; scripts/device_check.sh unpacks them with `dpkg -x` into a prefix
# inside its build directory (never into /) and points CMake there (FURLONG_DEPS_PREFIX).
#   bash scripts/fetch_device_debs.sh [DIR]
# The list is scripts/setup.sh's C++ libraries (benchmark left out: optional) plus what their
# headers, pkg-config files and shared libraries need beyond libc / libstdc++ / OpenSSL's and
# zlib's runtime libraries, which every image with a Python has. Idempotent: a package whose .deb
# is already there is not fetched again. Prints the folder's size (the carried tree must stay
# under 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.device-debs}
PACKAGES=(
  # headers and CMake / pkg-config files
  nlohmann-json3-dev libyaml-cpp-dev libpcre2-dev libicu-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libgloo-dev
  # what cpp-httplib's header includes and its .pc requires (OpenSSL, zlib, brotli)
  libssl-dev zlib1g-dev libbrotli-dev
  # the shared libraries the -dev packages' .so links point at
  libyaml-cpp0.7 libpcre2-8-0 libicu72 libcpp-httplib0.11 libbrotli1
  # pkg-config itself (CMake's FindPkgConfig needs the program)
  pkgconf-bin libpkgconf3
)
mkdir -p "$DIR"
want=()
for p in "${PACKAGES[@]}"; do
  compgen -G "$DIR/${p}_*.deb" >/dev/null || want+=("$p")
done
if ((${#want[@]})); then
  echo "[fetch-debs] apt-get download ${want[*]}"
  # apt's _apt user cannot write a root-owned folder; download as the caller, quietly.
  (cd "$DIR" && apt-get download -q "${want[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
  # An epoch's ':' is saved as "%3a"; plain names travel and unpack the same.
  for f in "$DIR"/*%3a*.deb; do [ -e "$f" ] && mv "$f" "${f//%3a/-}"; done
  for p in "${want[@]}"; do
    compgen -G "$DIR/${p}_*.deb" >/dev/null || { echo "fetch_device_debs: $p was not fetched" >&2; exit 1; }
  done
fi
echo "[fetch-debs] $(ls "$DIR"/*.deb | wc -l) packages, $(du -sh "$DIR" | cut -f1) in $DIR"
