"""Keeping docs/layout.md true to the tree (what the page names, and what the checkout holds), and
the links between the README and the docs pages working.

    .venv/bin/python -m devtools.layout_page     # prints the page's "Largest files" table, from the tree

The page's conventions (stated at its top, checked by tests/unit/test_layout_page.py):

- its first fenced block is the folder tree: one line per folder, ``<name>/`` indented two spaces per
  level under its parent, then what lives there (in that block only the folder names are paths);
- everywhere else a path is in backticks: with a slash it is written from the checkout's root, a bare
  file name is a file of the folder its section's heading names (a ``###`` heading that is a path);
- a backticked word is a path when it has a slash or ends in one of ``PATH_SUFFIXES``; words with
  spaces, ``*``, ``<``, ``$`` or ``://`` are never paths.

Plain Python and the standard library only, so the check runs anywhere in a fraction of a second.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = Path("docs") / "layout.md"
PACKAGE = "airflow_provider_mysqlcdc"
#: generated data, not code to read: left out of "Largest files"
GENERATED = frozenset({f"{PACKAGE}/cdc/records/charset_tables.py"})
#: top-level folders of a checkout that are not the project's (besides hidden ones)
NOT_PROJECT_FOLDERS = frozenset({".venv", "build", "dist", "var", "__pycache__"})
PATH_SUFFIXES = (".py", ".pyx", ".md", ".json", ".toml", ".png")
LARGEST_HEADING = "Largest files"
LARGEST_COUNT = 10
#: a listed line count may be this far from the file's (small edits do not fail the suite)
TOLERANCE = 0.15
#: every module of the package above this many lines must be in the table
MUST_LIST_ABOVE = 450

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_TREE_LINE = re.compile(r"^( *)([^\s/][^\s]*/)(?:\s|$)")
_FOLDER_HEADING = re.compile(r"^###\s+`([^`]+)`\s*$")
_TABLE_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([\d,]+)\s*\|")


@dataclass(frozen=True)
class Named:
    """A path the page names, as written from the checkout's root, and where."""

    path: str
    line: int
    how: str  # "tree", "backticks", or "bare name outside a folder section"


def read_page(root: Path = ROOT) -> str:
    return (root / PAGE).read_text(encoding="utf-8")


def _is_path_word(word: str) -> bool:
    if any(c in word for c in " *<>$") or "://" in word:
        return False
    return "/" in word or word.endswith(PATH_SUFFIXES)


def _tree_paths(lines: list[tuple[int, str]]) -> tuple[list[Named], list[str]]:
    """The folders of the tree block, and the lines it could not read."""
    named, problems, parents = [], [], []
    for number, line in lines:
        if not line.strip():
            continue
        match = _TREE_LINE.match(line)
        if not match or len(match.group(1)) % 2:
            problems.append(f"line {number}: not a tree line ('<name>/' indented by two spaces a level): {line!r}")
            continue
        depth = len(match.group(1)) // 2
        if depth > len(parents):
            problems.append(f"line {number}: indented more than one level below its parent: {line!r}")
            continue
        parents[depth:] = [match.group(2)]
        named.append(Named("".join(parents), number, "tree"))
    return named, problems


def named_paths(text: str) -> tuple[list[Named], list[str]]:
    """Every path the page names (tree block and backticks), and what could not be read."""
    named: list[Named] = []
    problems: list[str] = []
    tree: list[tuple[int, str]] | None = None
    tree_done = False
    in_fence = False
    folder: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            if in_fence and not tree_done:
                tree = []
            elif not in_fence and tree is not None and not tree_done:
                found, bad = _tree_paths(tree)
                named.extend(found)
                problems.extend(bad)
                tree_done = True
            continue
        if in_fence:
            if tree is not None and not tree_done:
                tree.append((number, line))
            continue  # other code blocks are examples, not claims about the tree
        if line.startswith("#"):
            heading = _FOLDER_HEADING.match(line)
            folder = heading.group(1).rstrip("/") + "/" if heading else None
        for word in _CODE_SPAN.findall(line):
            if not _is_path_word(word):
                continue
            if "/" in word:
                named.append(Named(word, number, "backticks"))
            elif folder is not None:
                named.append(Named(folder + word, number, "backticks"))
            else:
                named.append(Named(word, number, "bare name outside a folder section"))
    if in_fence:
        problems.append("a fenced block is not closed")
    if not tree_done:
        problems.append("no tree block (the page's first fenced block)")
    return named, problems


def missing_paths(text: str, root: Path = ROOT) -> list[str]:
    """Paths the page names that the checkout does not have, and names it cannot place."""
    named, problems = named_paths(text)
    for item in named:
        if item.how == "bare name outside a folder section":
            problems.append(f"line {item.line}: {item.path!r} is a bare name outside a folder section: "
                            "write it from the checkout's root")
            continue
        target = root / item.path
        exists = target.is_dir() if item.path.endswith("/") else target.exists()
        if not exists:
            problems.append(f"line {item.line}: {item.path!r} ({item.how}) does not exist")
    return problems


def required_folders(root: Path = ROOT) -> list[str]:
    """Folders the page must name: each folder of the package that holds modules, and each top-level
    folder of the checkout (not hidden ones, ``*.egg-info`` or ``NOT_PROJECT_FOLDERS``)."""
    folders = set()
    for module in (root / PACKAGE).rglob("*.py"):
        if "__pycache__" not in module.parts:
            folders.add(module.parent.relative_to(root).as_posix() + "/")
    for entry in root.iterdir():
        if (entry.is_dir() and not entry.name.startswith(".") and entry.name not in NOT_PROJECT_FOLDERS
                and not entry.name.endswith(".egg-info")):
            folders.add(entry.name + "/")
    return sorted(folders)


def unnamed_folders(text: str, root: Path = ROOT) -> list[str]:
    """Required folders the tree block leaves out (a heading or a backticked path does not count)."""
    named = {n.path for n in named_paths(text)[0] if n.how == "tree"}
    return [f for f in required_folders(root) if f not in named]


def package_modules(root: Path = ROOT) -> list[str]:
    """The package's modules, ``__init__.py`` left out."""
    return sorted(p.relative_to(root).as_posix() for p in (root / PACKAGE).rglob("*.py")
                  if "__pycache__" not in p.parts and p.name != "__init__.py")


def unnamed_modules(text: str, root: Path = ROOT) -> list[str]:
    named = {n.path for n in named_paths(text)[0]}
    return [m for m in package_modules(root) if m not in named]


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def module_sizes(root: Path = ROOT) -> dict[str, int]:
    """Line counts of the package's modules, generated ones left out."""
    return {m: line_count(root / m) for m in package_modules(root) if m not in GENERATED}


def largest_modules(root: Path = ROOT, count: int = LARGEST_COUNT) -> list[tuple[str, int]]:
    sizes = module_sizes(root)
    return sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:count]


def largest_files_table(root: Path = ROOT, count: int = LARGEST_COUNT) -> str:
    rows = [f"| `{path}` | {lines} |" for path, lines in largest_modules(root, count)]
    return "\n".join(["| module | lines |", "|---|---|", *rows])


def listed_largest(text: str) -> dict[str, int]:
    """The page's "Largest files" table: module -> the line count it states."""
    listed: dict[str, int] = {}
    in_section = False
    for line in text.splitlines():
        if line.startswith("#"):
            in_section = line.lstrip("#").strip() == LARGEST_HEADING
            continue
        if in_section:
            row = _TABLE_ROW.match(line)
            if row:
                listed[row.group(1)] = int(row.group(2).replace(",", ""))
    return listed


def largest_files_problems(text: str, root: Path = ROOT, tolerance: float = TOLERANCE,
                           must_list_above: int = MUST_LIST_ABOVE) -> list[str]:
    """What is wrong with the "Largest files" table: a module that is not there, a count off by more
    than ``tolerance``, a module of more than ``must_list_above`` lines left out."""
    listed = listed_largest(text)
    if not listed:
        return [f"no '{LARGEST_HEADING}' table with rows like | `path` | lines |"]
    problems = []
    for path, stated in sorted(listed.items()):
        if path in GENERATED:
            problems.append(f"{path} is generated and belongs out of the table")
            continue
        if not (root / path).is_file():
            problems.append(f"{path} is listed but does not exist")
            continue
        actual = line_count(root / path)
        if abs(stated - actual) > tolerance * actual:
            problems.append(f"{path} is listed with {stated} lines but has {actual}")
    for path, lines in module_sizes(root).items():
        if lines > must_list_above and path not in listed:
            problems.append(f"{path} has {lines} lines (more than {must_list_above}) but is not listed")
    return problems


# --- links between the README and the docs pages ------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings (code blocks left out; repeats numbered as GitHub does)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or not re.match(r"^#{1,6}\s", line):
            continue
        anchor = github_anchor(line.lstrip("#"))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def markdown_pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def broken_links(root: Path = ROOT, pages: list[Path] | None = None) -> list[str]:
    """Relative links of the README and the docs pages whose file or heading does not exist."""
    problems = []
    for page in pages if pages is not None else markdown_pages(root):
        in_fence = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            if _FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            for link in _LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", link):
                    continue  # http:, https:, mailto: ...
                target, _, anchor = link.partition("#")
                where = f"{page.relative_to(root).as_posix()}:{number}: {link}"
                path = (page.parent / target).resolve() if target else page
                if not path.exists():
                    problems.append(f"{where}: no such file")
                elif anchor and (path.suffix != ".md" or anchor not in anchors(path.read_text(encoding="utf-8"))):
                    problems.append(f"{where}: no such heading")
                elif target and root.resolve() not in path.parents:
                    problems.append(f"{where}: outside the repository")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Print the "Largest files" table from the tree, and say whether the page needs it."""
    del argv
    print(largest_files_table())
    page = ROOT / PAGE
    if page.exists():
        problems = largest_files_problems(page.read_text(encoding="utf-8"))
        print(f"\n{PAGE}: " + ("the table is current" if not problems else "; ".join(problems)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
