#!/usr/bin/env python3
"""Comments may only name flags that exist (run by `make lint` and CI).

Collects the flag names the flag tables register (`f.add("name", ...)`,
`f.add_enum<...>("name", ...)` in src/app/) and the flags of other programs that comments
legitimately mention (torchrun's, SGLang's), then scans every `//` comment in src/ for
`--some-flag`. A flag named in a comment that no table registers is an error: either the flag
was renamed or removed, or the comment describes something that does not exist.
"""
import pathlib
import re
import sys

# Flags of other programs that furlong's comments refer to on purpose.
FOREIGN = {
    "no-python", "nproc-per-node", "nnodes", "node-rank", "master-addr", "master-port",  # torchrun
    "mem-fraction-static",  # SGLang
}

REGISTERED = re.compile(r'\.add(?:_enum<[^>]*>)?\(\s*"([a-z0-9][a-z0-9-]*)"')
LITERAL = re.compile(r'"--([a-z0-9][a-z0-9-]*)"')
MENTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def registered_flags(src):
    names = set(FOREIGN)
    for path in (src / "app").glob("*.cpp"):
        text = path.read_text(encoding="utf-8")
        names.update(REGISTERED.findall(text))
        names.update(LITERAL.findall(text))  # flags parsed by hand (launch, --config, --help)
    for path in (src / "config").glob("*.cpp"):
        names.update(LITERAL.findall(path.read_text(encoding="utf-8")))
    return names


def comment_of(line):
    # The // comment of a line, ignoring // inside string literals (good enough for our code).
    in_string = False
    for i, ch in enumerate(line):
        if ch == '"' and (i == 0 or line[i - 1] != "\\"):
            in_string = not in_string
        elif not in_string and line.startswith("//", i):
            return line[i + 2:]
    return ""


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    src = root / "src"
    flags = registered_flags(src)
    errors = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in MENTION.findall(comment_of(line)):
                bare = name[3:] if name.startswith("no-") else name
                if name not in flags and bare not in flags:
                    errors.append(f"{path.relative_to(root)}:{n}: comment names --{name}, "
                                  "which no flag table registers")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_comment_flags: {len(errors)} comment(s) name flags that do not exist",
              file=sys.stderr)
        return 1
    print(f"check_comment_flags: ok ({len(flags)} flags known)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
