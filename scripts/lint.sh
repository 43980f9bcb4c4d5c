#!/usr/bin/env bash
# Conventions checked by machine: clang-format, file-size caps, flags named in comments, commit
# subjects of at most 100 characters.
# (The layering rule is enforced by the build itself: cmake/FurlongTargets.cmake.)
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files 'src/*.h' 'src/*.cpp' 'tests/*.h' 'tests/*.cpp' 'bench/*.cpp' 2>/dev/null || true)
if [ -n "$files" ]; then
  clang-format --dry-run -Werror $files
fi
python3 scripts/check_file_sizes.py
python3 scripts/check_comment_flags.py
python3 scripts/check_commit_subjects.py
echo "lint: ok"
