#!/usr/bin/env python3
"""Fresh-machine guard: every package the build asks CMake for is installed by
scripts/setup-deps.sh.

A green CI on a machine that already holds a package someone installed by hand hides a missing
install step (issue 19, item 1: find_package(spdlog) with no libspdlog-dev in the script). This
test reads every find_package / pkg_check_modules call in the tree's CMake files and fails when
  1. a package is not in KNOWN_PACKAGES below (a new dependency: say which Debian package has it),
  2. its Debian package is not in the `packages=(...)` list of scripts/setup-deps.sh, or
  3. (where dpkg is present and the package's CMake config file is found on this machine) the
     config file belongs to a different Debian package than the table says.
Usage: setup_deps_test.py SOURCE_ROOT    (exit 0 = pass, 1 = a finding, printed in plain words)
       setup_deps_test.py --self-test SOURCE_ROOT   (the check fails on planted faults: exit 0 = it did)
"""
import os
import re
import subprocess
import sys

# CMake package name -> the Debian 12 package that provides it. None: not a Debian package by
# design (the CUDA 13 toolkit comes from NVIDIA's installer on the GPU machines, and the CUDA
# build is optional: MOEWB_CUDA=AUTO switches it off when nvcc is missing).
KNOWN_PACKAGES = {
    "Threads": "build-essential",
    "SQLite3": "libsqlite3-dev",
    "tomlplusplus": "libtomlplusplus-dev",
    "nlohmann_json": "nlohmann-json3-dev",
    "CLI11": "libcli11-dev",
    "fmt": "libfmt-dev",
    "OpenBLAS": "libopenblas-dev",
    "Qt6": "qt6-base-dev",
    "GTest": "libgtest-dev",
    "benchmark": "libbenchmark-dev",
    "Python3": "python3",
    "Git": "git",  # FindGit (a CMake module): the tuner records the commit it was built from
    "CUDAToolkit": None,
}

FIND_CALL = re.compile(r"^\s*(?:find_package|pkg_check_modules)\s*\(\s*([A-Za-z0-9_+-]+)", re.M)
SKIP_DIRS = {".git", "build", "build-gpu", ".gpu", "runs"}


def cmake_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
        for name in filenames:
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                yield os.path.join(dirpath, name)


def requested_packages(root):
    found = {}
    for path in cmake_files(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for match in FIND_CALL.finditer(text):
            found.setdefault(match.group(1), os.path.relpath(path, root))
    return found


def setup_deps_packages(root):
    with open(os.path.join(root, "scripts", "setup-deps.sh"), encoding="utf-8") as f:
        text = f.read()
    block = re.search(r"packages=\((.*?)\)", text, re.S)
    if not block:
        raise SystemExit("scripts/setup-deps.sh has no packages=(...) list")
    lines = [line.split("#", 1)[0] for line in block.group(1).splitlines()]
    return set(" ".join(lines).split())


def config_file_owner(cmake_name):
    """The Debian package owning <name>Config.cmake / <name>-config.cmake, or None if unknown."""
    lower = cmake_name.lower()
    candidates = [f"{cmake_name}Config.cmake", f"{lower}-config.cmake", f"{cmake_name}-config.cmake"]
    for base in ("/usr/lib", "/usr/share"):
        for dirpath, _, filenames in os.walk(base):
            if "/cmake" not in dirpath:
                continue
            for name in filenames:
                if name in candidates:
                    try:
                        out = subprocess.run(["dpkg", "-S", os.path.join(dirpath, name)],
                                             capture_output=True, text=True, timeout=30)
                    except (OSError, subprocess.TimeoutExpired):
                        return None
                    if out.returncode == 0:
                        return out.stdout.split(":", 1)[0].strip()
    return None


def self_test(root):
    """Plants the two faults of issue 19 item 1 into a copy of the build files; both must fail."""
    import shutil
    import tempfile
    failures = 0
    for fault in ("unknown find_package", "package missing from setup-deps.sh"):
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "scripts"))
            shutil.copy(os.path.join(root, "scripts", "setup-deps.sh"), os.path.join(tmp, "scripts"))
            for path in cmake_files(root):
                target = os.path.join(tmp, os.path.relpath(path, root))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy(path, target)
            if fault == "unknown find_package":
                with open(os.path.join(tmp, "CMakeLists.txt"), "a", encoding="utf-8") as f:
                    f.write("\nfind_package(spdlog REQUIRED)\n")
            else:
                script = os.path.join(tmp, "scripts", "setup-deps.sh")
                with open(script, encoding="utf-8") as f:
                    text = f.read()
                with open(script, "w", encoding="utf-8") as f:
                    f.write(text.replace(" libfmt-dev", ""))
            result = subprocess.run([sys.executable, __file__, tmp], capture_output=True, text=True)
            verdict = "caught" if result.returncode == 1 else "MISSED"
            print(f"planted fault '{fault}': {verdict}")
            failures += result.returncode != 1
    return 1 if failures else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--self-test":
        return self_test(sys.argv[2])
    if len(sys.argv) != 2:
        print("usage: setup_deps_test.py [--self-test] SOURCE_ROOT")
        return 2
    root = sys.argv[1]
    requested = requested_packages(root)
    installed_by_script = setup_deps_packages(root)
    problems = []
    for name, where in sorted(requested.items()):
        if name not in KNOWN_PACKAGES:
            problems.append(f"{where}: find_package({name}) is not in KNOWN_PACKAGES of "
                            f"tests/build/setup_deps_test.py; add the Debian package that provides it "
                            f"there and to scripts/setup-deps.sh")
            continue
        debian = KNOWN_PACKAGES[name]
        if debian is None:
            continue
        if debian not in installed_by_script:
            problems.append(f"{where}: find_package({name}) needs the Debian package {debian}, "
                            f"which scripts/setup-deps.sh does not install")
        # Debian's -dev packages that ship the config file under another name (e.g. a common
        # package) are listed here only when this machine says otherwise.
        if os.path.exists("/usr/bin/dpkg") and name not in ("Threads", "SQLite3", "Python3", "OpenBLAS", "Git"):
            owner = config_file_owner(name)
            if owner is not None and owner != debian and owner not in installed_by_script:
                problems.append(f"{where}: {name}'s CMake config file belongs to the Debian "
                                f"package {owner} on this machine, not to {debian}; install {owner} "
                                f"in scripts/setup-deps.sh")
    for name in sorted(set(KNOWN_PACKAGES) - set(requested)):
        problems.append(f"KNOWN_PACKAGES names {name}, which no CMake file asks for any more; "
                        f"remove it (and its package from scripts/setup-deps.sh if nothing else needs it)")
    for problem in problems:
        print(problem)
    print(f"{len(requested)} CMake packages checked against {len(installed_by_script)} Debian "
          f"packages of scripts/setup-deps.sh: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
