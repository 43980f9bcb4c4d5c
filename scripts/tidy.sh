#!/usr/bin/env bash
# clang-tidy with the checks of .clang-tidy (bugprone-*, performance-*) over furlong's sources.
#   bash scripts/tidy.sh                 the .cpp files changed since origin/main (or HEAD~1)
#   bash scripts/tidy.sh FILE...         those files
#   TIDY_ALL=1 bash scripts/tidy.sh      every .cpp under src/ (about 20 s a file on 2 cores)
# It configures build-tidy/ without precompiled headers (clang cannot read GCC's), so it never
# touches build/. Exits non-zero when clang-tidy reports a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-tidy >/dev/null || {
  echo "tidy: clang-tidy is not installed (apt-get install clang-tidy)" >&2
  exit 2
}
TIDY_BUILD=${TIDY_BUILD:-build-tidy}
if [ ! -f "$TIDY_BUILD/compile_commands.json" ]; then
  cmake -S . -B "$TIDY_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFURLONG_USE_PCH=OFF \
    >/dev/null
fi
if (($#)); then
  files=("$@")
elif [ "${TIDY_ALL:-0}" = 1 ]; then
  mapfile -t files < <(git ls-files 'src/*.cpp')
else
  base=$(git rev-parse -q --verify origin/main || git rev-parse HEAD~1)
  mapfile -t files < <(git diff --name-only --diff-filter=AM "$base" -- 'src/*.cpp')
fi
((${#files[@]})) || { echo "tidy: no files to check"; exit 0; }
status=0
for f in "${files[@]}"; do
  out=$(clang-tidy -p "$TIDY_BUILD" --quiet --extra-arg=-Wno-unknown-warning-option "$f" 2>&1 || true)
  if grep -q "warning:\|error:" <<<"$out"; then
    echo "$out" | grep -A3 "warning:\|error:"
    status=1
  fi
done
echo "tidy: ${#files[@]} file(s) checked"
exit $status
