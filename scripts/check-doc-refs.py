#!/usr/bin/env python3
"""Fails when a doc names a file, header, CMake target or doc section that does not exist.

Usage: python3 scripts/check-doc-refs.py [--root DIR] [FILE.md ...]

Without FILE arguments it checks README.md, bench/README.md, bench/pg/README.md and every
docs/**/*.md, plus the doc citations in code comments (rule 6). Exit status 0 when every
reference resolves, 1 (with one `file:line: message` per problem) when one does not. ctest runs
it as `doc_refs` (label docs, tests/docs/CMakeLists.txt); tests/docs/selftest.py makes each rule
fail on purpose. Python 3 standard library only.

What counts as a reference (in prose, code spans and code blocks alike):

1. A repository path: a token starting with one of the repository's own top-level directories
   (.ci include scripts bench tests examples tools docs cmake fuzz) followed by `/`. It must name
   an existing file or directory relative to the root. `*`, `<name>` and `${name}` in it are
   wildcards, and then at least one path must match (`tests/test_*.cpp`, `fuzz/corpus/<target>/`).
   `build/<preset>/...` is a build output, not a path: see rule 4.
2. An ax header: `ax/....hpp` (as in `#include <ax/pg/pg.hpp>`) must exist under include/.
3. A bare source name: a token like `node_driver.hpp`, `detail/futex.hpp`, `ax-pg.cpp`,
   `bench-pg.sh`, `layers.cmake` (extensions .hpp .cpp .sh .py .cmake) must be the tail of some
   file's path in the repository, cut at a `/`. Inside `<...>` with a first component other
   than `ax` it is a system or third-party header and is not checked (`<nlohmann/json.hpp>`).
4. A CMake target: the name after `--target `, and the last component (without a `.`) of a path
   `build/<preset>/.../<name>` whose `<preset>` is a configure preset in CMakePresets.json, must
   be a target that some CMakeLists.txt creates (add_executable, add_library,
   add_custom_target; `${v}` in a name is expanded over the items of a `foreach(v ...)` in the
   same file; tests/CMakeLists.txt builds each tests/test_*.cpp as a target of its stem). Other
   `build/<dir>/` trees (scripts' own, like build/bench-pg/) are not checked.
5. `ax::name` (and `ax::name::more`): each name must be a CMake target alias (`ax::pg`) or occur
   as a word in a header under include/ax, so a renamed or removed API does not linger in docs.
6. A markdown link `[text](target)` that is not a URL: the target, relative to the doc's own
   folder, must exist, and its `#anchor`, if any, must be a heading of that doc (GitHub's slug)
   or a `<!-- section: name -->` marker in it. In code comments under include/ bench/ tests/
   examples/ tools/ fuzz/, a citation `docs/x.md, "Heading"` (or `README.md, "Heading"`) must
   name an existing doc with a heading of that text (case-insensitive) or a section marker
   (tests/docs/, whose self-test holds deliberate bad citations, is not scanned).

7. A snippet: a fenced code block right after `<!-- snippet: PATH -->` must be a run of
   consecutive lines of PATH, exactly (trailing blanks aside), so an example the docs show is the
   one that ctest compiles and runs (the README's API block is examples/quickstart.cpp).

A line right after `<!-- doc-refs: ignore-next-line -->` is not checked: for deliberately
hypothetical names (an example of a file a user would write) and for the journals' record of
files that existed then.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import sys
from pathlib import Path

TOP_DIRS = (".ci", "include", "scripts", "bench", "tests", "examples", "tools", "docs", "cmake", "fuzz")
SOURCE_EXTS = ("hpp", "cpp", "sh", "py", "cmake")
SKIP_DIRS = {".git", "build", "node_modules", "wip", "__pycache__"}
IGNORE_MARK = "<!-- doc-refs: ignore-next-line -->"
CODE_DIRS = ("include", "bench", "tests", "examples", "tools", "fuzz")

PATH_RE = re.compile(
    r"(?<![\w.@/<-])((?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/(?:[\w.+*/-]|<[\w-]+>|\$\{\w+\})*)"
)
BUILD_RE = re.compile(r"(?<![\w./-])build/([\w-]+)/((?:[\w.-]+/)*)([\w.-]+)")
HEADER_RE = re.compile(r"(?<![\w./-])(ax/[\w/.-]+\.hpp)")
BARE_RE = re.compile(r"(?<![\w./<-])((?:[\w-]+/)*[\w.-]*\w\.(?:" + "|".join(SOURCE_EXTS) + r"))(?![\w/-])")
ANGLE_RE = re.compile(r"<([\w./-]+\.(?:hpp|h))>")
TARGET_OPT_RE = re.compile(r"--target\s+([\w:.-]+)")
NS_RE = re.compile(r"(?<![\w:])ax((?:::[A-Za-z_]\w*)+)")
LINK_RE = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SNIPPET_RE = re.compile(r"<!--\s*snippet:\s*(\S+)\s*-->")
SECTION_RE = re.compile(r"<!--\s*section:\s*([\w.-]+)\s*-->")
CITE_RE = re.compile(r"((?:docs/[\w/.-]+|README)\.md)(?:,|:)?\s+(?:section\s+)?\"([^\"]+)\"")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


class Repo:
    def __init__(self, root: Path):
        self.root = root
        self.files: list[str] = []
        self.dirs: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
            if rel != ".":
                self.dirs.add(rel.replace(os.sep, "/"))
            for f in filenames:
                self.files.append(f if rel == "." else (rel.replace(os.sep, "/") + "/" + f))
        self.all_paths = set(self.files) | self.dirs
        self.targets, self.aliases = self._targets()
        self.presets = self._presets()
        self._words: set[str] | None = None
        self._headings: dict[str, tuple[set[str], set[str]]] = {}

    def _targets(self) -> tuple[set[str], set[str]]:
        targets: set[str] = set()
        aliases: set[str] = set()
        for f in self.files:
            if not (f.endswith("CMakeLists.txt") or f.endswith(".cmake")):
                continue
            text = (self.root / f).read_text(errors="replace")
            loops: dict[str, list[str]] = {}
            for m in re.finditer(r"foreach\(\s*(\w+)\s+((?:IN\s+ITEMS\s+)?[^)$]*)\)", text):
                loops[m.group(1)] = m.group(2).replace("IN ITEMS", "").split()
            for m in re.finditer(r"add_(?:executable|library|custom_target)\(\s*([\w:${}.-]+)([^)]*)", text):
                name, rest = m.group(1), m.group(2)
                if "ALIAS" in rest.split():
                    aliases.add(name)
                var = re.search(r"\$\{(\w+)\}", name)
                if var:
                    if name == "${" + var.group(1) + "}":
                        continue  # a function's parameter: covered below or not checkable
                    for item in loops.get(var.group(1), []):
                        targets.add(name.replace(var.group(0), item))
                else:
                    targets.add(name)
        # tests/CMakeLists.txt: ax_add_test(<stem>) for every tests/test_*.cpp.
        for f in self.files:
            if re.fullmatch(r"tests/test_\w+\.cpp", f):
                targets.add(f[len("tests/") : -len(".cpp")])
        return targets | aliases, aliases

    def _presets(self) -> set[str]:
        p = self.root / "CMakePresets.json"
        if not p.exists():
            return set()
        data = json.loads(p.read_text())
        return {c["name"] for c in data.get("configurePresets", [])}

    def words(self) -> set[str]:
        if self._words is None:
            self._words = set()
            for f in self.files:
                if f.startswith("include/ax/") and f.endswith(".hpp"):
                    self._words.update(re.findall(r"\w+", (self.root / f).read_text(errors="replace")))
        return self._words

    def headings(self, rel: str) -> tuple[set[str], set[str]]:
        """(slugs and markers, lower-case heading texts and markers) of a markdown file."""
        if rel not in self._headings:
            slugs: set[str] = set()
            texts: set[str] = set()
            in_code = False
            for line in (self.root / rel).read_text(errors="replace").splitlines():
                if line.lstrip().startswith("```"):
                    in_code = not in_code
                    continue
                for m in SECTION_RE.finditer(line):
                    slugs.add(m.group(1))
                    texts.add(m.group(1).lower())
                h = HEADING_RE.match(line)
                if h and not in_code:
                    slugs.add(slug(h.group(2)))
                    texts.add(h.group(2).strip().strip("`").lower())
            self._headings[rel] = (slugs, texts)
        return self._headings[rel]

    def exists(self, path: str) -> bool:
        path = path.rstrip("/")
        if any(c in path for c in "*<$"):
            pattern = re.sub(r"<[\w-]+>|\$\{\w+\}", "*", path)
            return any(fnmatch.fnmatchcase(p, pattern) for p in self.all_paths)
        return path in self.all_paths

    def has_tail(self, tail: str) -> bool:
        return any(f == tail or f.endswith("/" + tail) for f in self.files)


def check_markdown(repo: Repo, rel: str, text: str) -> list[str]:
    problems: list[str] = []
    doc_dir = os.path.dirname(rel)
    skip_next = False
    lines = text.splitlines()
    problems += check_snippets(repo, rel, lines)
    for lineno, line in enumerate(lines, 1):
        if skip_next:
            skip_next = False
            continue
        if IGNORE_MARK in line:
            skip_next = True
            continue

        def bad(msg: str) -> None:
            problems.append(f"{rel}:{lineno}: {msg}")

        system = {m.group(1) for m in ANGLE_RE.finditer(line) if not m.group(1).startswith("ax/")}
        for m in BUILD_RE.finditer(line):
            preset, name = m.group(1), m.group(3)
            if preset in repo.presets and name not in repo.targets and "." not in name:
                bad(f"build/{preset}/{m.group(2)}{name}: no CMake target '{name}'")
        for m in PATH_RE.finditer(line):
            path = m.group(1).rstrip(".,:;")
            if not repo.exists(path):
                bad(f"'{path}' does not exist")
        for m in HEADER_RE.finditer(line):
            if not repo.exists("include/" + m.group(1)):
                bad(f"header <{m.group(1)}> does not exist (include/{m.group(1)})")
        for m in BARE_RE.finditer(line):
            name = m.group(1)
            first = name.split("/")[0]
            if name in system or first in TOP_DIRS or first in ("ax", "build") or "/" + name in "".join(system):
                continue
            if not repo.has_tail(name):
                bad(f"'{name}' is no file of the repository")
        for m in TARGET_OPT_RE.finditer(line):
            if m.group(1) not in repo.targets:
                bad(f"--target {m.group(1)}: no such CMake target")
        for m in NS_RE.finditer(line):
            parts = m.group(1).split("::")[1:]
            if "ax::" + parts[0] in repo.aliases:
                parts = parts[1:]
            missing = [p for p in parts if p not in repo.words()]
            if missing:
                bad(f"ax{m.group(1)}: '{missing[0]}' is no CMake target and appears in no header under include/ax")
        for m in LINK_RE.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(doc_dir, path)).replace(os.sep, "/") if path else rel
            if dest.startswith(".."):
                bad(f"link '{target}' leaves the repository")
                continue
            if not repo.exists(dest):
                bad(f"link '{target}': {dest} does not exist")
            elif anchor and dest.endswith(".md") and anchor not in repo.headings(dest)[0]:
                bad(f"link '{target}': no heading or section marker '#{anchor}' in {dest}")
    return problems


def check_snippets(repo: Repo, rel: str, lines: list[str]) -> list[str]:
    problems: list[str] = []
    for i, line in enumerate(lines):
        m = SNIPPET_RE.search(line)
        if not m or (i > 0 and IGNORE_MARK in lines[i - 1]):
            continue
        src = m.group(1)
        if src not in repo.files:
            problems.append(f"{rel}:{i + 1}: snippet source '{src}' does not exist")
            continue
        if i + 1 >= len(lines) or not lines[i + 1].lstrip().startswith("```"):
            problems.append(f"{rel}:{i + 1}: a snippet marker must stand right before a fenced code block")
            continue
        end = next((j for j in range(i + 2, len(lines)) if lines[j].lstrip().startswith("```")), len(lines))
        block = [b.rstrip() for b in lines[i + 2 : end]]
        have = [f.rstrip() for f in (repo.root / src).read_text(errors="replace").splitlines()]
        n = len(block)
        if not any(have[k : k + n] == block for k in range(len(have) - n + 1)):
            first = next((b for b in block if not any(b == h for h in have)), None)
            hint = f" (first line not in it: {first!r})" if first is not None else " (lines out of order)"
            problems.append(f"{rel}:{i + 1}: the code block is not a run of lines of {src}{hint}")
    return problems


def check_code_citations(repo: Repo) -> list[str]:
    problems: list[str] = []
    for f in repo.files:
        if not f.startswith(CODE_DIRS) or f.startswith("tests/docs/") or not f.endswith((".hpp", ".cpp", ".h", ".txt", ".cmake", ".sh", ".py")):
            continue
        text = (repo.root / f).read_text(errors="replace")
        # A citation may wrap across comment lines: join them, keep line numbers by position.
        flat = re.sub(r"\n\s*(?://+|#|\*)\s?", " ", text)
        for m in CITE_RE.finditer(flat):
            doc, heading = m.group(1), m.group(2)
            lineno = text.count("\n", 0, text.find(doc)) + 1 if doc in text else 0
            if not repo.exists(doc):
                problems.append(f"{f}:{lineno}: cites {doc}, which does not exist")
            elif heading.strip().lower() not in repo.headings(doc)[1]:
                problems.append(f"{f}:{lineno}: cites {doc}, \"{heading}\": no such heading or section marker")
    return problems


def default_docs(repo: Repo) -> list[str]:
    docs = [f for f in ("README.md", "bench/README.md", "bench/pg/README.md") if f in repo.files]
    docs += sorted(f for f in repo.files if f.startswith("docs/") and f.endswith(".md"))
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("docs", nargs="*", help="markdown files relative to the root (default: all docs)")
    args = ap.parse_args()
    repo = Repo(Path(args.root).resolve())
    docs = args.docs or default_docs(repo)
    problems: list[str] = []
    for rel in docs:
        problems += check_markdown(repo, rel, (repo.root / rel).read_text(errors="replace"))
    if not args.docs:
        problems += check_code_citations(repo)
    for p in problems:
        print(p)
    print(f"check-doc-refs: {len(docs)} doc(s), {len(problems)} dangling reference(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
