#!/usr/bin/env bash
# Conventions checked by machine: clang-format, the layering rule, file-size caps.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files 'src/*.h' 'src/*.cpp' 'tests/*.h' 'tests/*.cpp' 'bench/*.cpp' 2>/dev/null || true)
if [ -n "$files" ]; then
  clang-format --dry-run -Werror $files
fi
python3 scripts/check_layering.py
python3 scripts/check_comment_flags.py
echo "lint: ok"
