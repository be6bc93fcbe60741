#!/usr/bin/env python3
"""Fails when a source file includes a header across a forbidden edge of the module graph.

The graph (DESIGN.md): base <- storage, engine; profiler -> storage, engine; tuner -> profiler,
engine, storage; gui and cli -> anything below them (gui never from cli and vice versa).
Usage: layering_test.py REPO_ROOT [--self-test]
"""
import pathlib
import re
import sys

ALLOWED = {
    "base": {"base"},
    "storage": {"base", "storage"},
    "engine": {"base", "engine"},
    "profiler": {"base", "storage", "engine", "profiler"},
    "tuner": {"base", "storage", "engine", "profiler", "tuner"},
    "gui": {"base", "storage", "engine", "profiler", "tuner", "gui"},
    "cli": {"base", "storage", "engine", "profiler", "tuner", "cli"},
}
# Third-party headers a module may not use either: SQLite belongs to storage, Qt to gui.
FORBIDDEN_SYSTEM = {
    "sqlite3.h": {"storage"},
}
QT_RE = re.compile(r'#\s*include\s*[<"](Q[A-Za-z]+|Qt[A-Za-z]+/)')
INCLUDE_RE = re.compile(r'#\s*include\s*[<"]moewb/([a-z_]+)/')
SYSTEM_RE = re.compile(r'#\s*include\s*[<"]([^>"]+)[>"]')
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}


def violations(root: pathlib.Path):
    found = []
    for module, allowed in ALLOWED.items():
        base = root / module
        if not base.is_dir():
            continue
        for path in base.rglob("*"):
            if path.suffix not in SOURCE_SUFFIXES:
                continue
            text = path.read_text(errors="replace")
            for lineno, line in enumerate(text.splitlines(), 1):
                m = INCLUDE_RE.search(line)
                if m and m.group(1) not in allowed:
                    found.append(f"{path.relative_to(root)}:{lineno}: {module} may not include "
                                 f"moewb/{m.group(1)}/ (allowed: {', '.join(sorted(allowed))})")
                s = SYSTEM_RE.search(line)
                if s and s.group(1) in FORBIDDEN_SYSTEM and module not in FORBIDDEN_SYSTEM[s.group(1)]:
                    found.append(f"{path.relative_to(root)}:{lineno}: {module} may not include "
                                 f"{s.group(1)} (only {', '.join(FORBIDDEN_SYSTEM[s.group(1)])})")
                if QT_RE.search(line) and module != "gui":
                    found.append(f"{path.relative_to(root)}:{lineno}: {module} may not include Qt")
    return found


def self_test(tmp: pathlib.Path):
    (tmp / "engine").mkdir(parents=True)
    (tmp / "engine" / "bad.cpp").write_text('#include "moewb/storage/trace_writer.h"\n')
    assert violations(tmp), "the checker missed engine -> storage"
    (tmp / "engine" / "bad.cpp").write_text('#include <sqlite3.h>\n')
    assert violations(tmp), "the checker missed engine -> sqlite3.h"
    (tmp / "engine" / "bad.cpp").write_text('#include "moewb/base/status.h"\n')
    assert not violations(tmp), "the checker flagged an allowed include"


def main():
    import tempfile
    root = pathlib.Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        self_test(pathlib.Path(tmp))
    found = violations(root)
    for v in found:
        print(v)
    print(f"{0 if found else 1} passed, {1 if found else 0} failed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
