#!/usr/bin/env python3
"""Self-test of scripts/check-doc-refs.py: each rule must fail on a dangling reference.

Builds a small repository in a temporary folder (a header, a script, a CMakeLists.txt with
targets, a preset file, a doc with headings), then runs the checker on one-line docs: every
good line must pass, every dangling one must fail and name the reference, and a dangling line
after `<!-- doc-refs: ignore-next-line -->` must pass. ctest runs it as doc_refs_selftest.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

CHECKER = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "scripts/check-doc-refs.py"

TREE = {
    "include/ax/scheduler.hpp": "namespace ax { class Scheduler; struct Config; }\n",
    "include/ax/detail/futex.hpp": "namespace ax::detail { void futex_wait(); }\n",
    "scripts/test.sh": "#!/bin/sh\n",
    "tests/test_queue.cpp": "",
    "tests/CMakeLists.txt": "",
    "bench/CMakeLists.txt": "add_executable(ax_micro micro.cpp)\nforeach(t a b)\n  add_executable(ax_fuzz_${t} f.cpp)\nendforeach()\n",
    "CMakeLists.txt": "add_library(ax INTERFACE)\nadd_library(ax::ax ALIAS ax)\nadd_library(ax::pg ALIAS ax)\n",
    "CMakePresets.json": '{"configurePresets": [{"name": "default"}]}\n',
    "docs/design.md": "# Design\n\n## The hot path\n\n<!-- section: quick-start -->\ntext\n",
    # A code comment citing a doc section by name.
    "include/ax/queue.hpp": '// see docs/design.md, "The hot path"\n',
    "examples/quick.cpp": "int main() {\n    return 0;\n}\n",
}

GOOD = [
    "Run `bash scripts/test.sh`, see include/ax/detail/futex.hpp and tests/test_*.cpp.",
    "`#include <ax/scheduler.hpp>`, `<nlohmann/json.hpp>`, `detail/futex.hpp`, `futex.hpp`.",
    "`cmake --build --preset default --target ax_micro`, then build/default/bench/ax_micro and build/default/bench/ax_fuzz_b.",
    "Link `ax::pg`, build an `ax::Scheduler` from an `ax::Config`; `ax::detail::futex_wait`.",
    "[design](docs/design.md#the-hot-path), [start](docs/design.md#quick-start), build/bench-pg/whatever.",
    "<!-- snippet: examples/quick.cpp -->\n```cpp\n    return 0;\n}\n```",
]
BAD = [
    ("scripts/missing.sh", "Run `bash scripts/missing.sh`."),
    ("tests/nope_*.cpp", "the files tests/nope_*.cpp"),
    ("ax/nothing.hpp", "`#include <ax/nothing.hpp>`"),
    ("gone.hpp", "see `detail/gone.hpp`"),
    ("--target ax_macro", "`cmake --build --preset default --target ax_macro`"),
    ("ax_mikro", "run build/default/bench/ax_mikro"),
    ("ax::Sheduler", "an `ax::Sheduler`"),
    ("docs/nothing.md", "[x](docs/nothing.md)"),
    ("#no-such-heading", "[x](docs/design.md#no-such-heading)"),
    ("not a run of lines", "<!-- snippet: examples/quick.cpp -->\n```cpp\nint main() {\n    return 1;\n}\n```"),
    ("snippet source", "<!-- snippet: examples/gone.cpp -->\n```cpp\n```"),
]


def run(root: Path, text: str) -> subprocess.CompletedProcess:
    (root / "README.md").write_text(text + "\n")
    return subprocess.run([sys.executable, str(CHECKER), "--root", str(root), "README.md"], capture_output=True, text=True)


def main() -> int:
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in TREE.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        for line in GOOD:
            r = run(root, line)
            if r.returncode != 0:
                failures.append(f"good line failed: {line!r}\n{r.stdout}")
        for needle, line in BAD:
            r = run(root, line)
            if r.returncode != 1 or needle not in r.stdout:
                failures.append(f"dangling reference {needle!r} not reported (rc {r.returncode}): {line!r}\n{r.stdout}")
            r = run(root, "<!-- doc-refs: ignore-next-line -->\n" + line)
            if r.returncode != 0:
                failures.append(f"ignore-next-line did not skip {line!r}\n{r.stdout}")
        # Whole-tree mode: a code comment citing a section that does not exist fails.
        (root / "README.md").write_text("ok\n")
        r = subprocess.run([sys.executable, str(CHECKER), "--root", str(root)], capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"whole tree with a good citation failed:\n{r.stdout}")
        (root / "include/ax/queue.hpp").write_text('// see docs/design.md,\n// "The cold path"\n')
        r = subprocess.run([sys.executable, str(CHECKER), "--root", str(root)], capture_output=True, text=True)
        if r.returncode != 1 or "The cold path" not in r.stdout:
            failures.append(f"a citation of a missing section was not reported:\n{r.stdout}")
    for f in failures:
        print("FAIL:", f)
    print(f"doc_refs_selftest: {len(GOOD) + 2 * len(BAD) + 2} cases, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
