#!/usr/bin/env python3
"""Commit subjects of at most 100 characters (run by `make lint` and CI).

Checked: every commit after BASELINE, the last commit before the rule (older history has
longer subjects and is left as it is). Works offline in a clean clone. Where the baseline is
not in the history (a shallow clone, or a branch that forked before it) only HEAD is checked;
outside a git work tree nothing is.
"""
import pathlib
import subprocess
import sys

MAX_SUBJECT = 100
BASELINE = "4e0278f"


def git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          encoding="utf-8", errors="replace")


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    if git(root, "rev-parse", "--verify", "--quiet", "HEAD").returncode != 0:
        print("commit subjects: not a git work tree with commits; skipped")
        return 0
    has_base = (git(root, "cat-file", "-e", BASELINE + "^{commit}").returncode == 0 and
                git(root, "merge-base", "--is-ancestor", BASELINE, "HEAD").returncode == 0)
    revs = [BASELINE + "..HEAD"] if has_base else ["-1", "HEAD"]
    log = git(root, "log", "--format=%h%x00%s", *revs)
    if log.returncode != 0:
        print("error: git log failed:", log.stderr.strip())
        return 1
    errors = []
    for line in log.stdout.splitlines():
        sha, _, subject = line.partition("\0")
        if len(subject) > MAX_SUBJECT:
            errors.append(f"{sha}: subject of {len(subject)} characters (limit {MAX_SUBJECT}): "
                          f"{subject[:60]}...")
    for e in errors:
        print("error:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
