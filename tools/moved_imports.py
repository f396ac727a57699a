"""Rewrite hybriddeid's module paths from before its layer folders (``hybriddeid.batch``) to their new ones.

    python tools/moved_imports.py PATH ...          # rewrite in place: files, or folders (their .py, .md, .ipynb, .toml, .sh)
    python tools/moved_imports.py --check PATH ...  # only list what would change; exit 1 when anything would

The table is ``hybriddeid._moved.MOVED`` (``hybriddeid.batch`` -> ``hybriddeid.runs.batch``); a path written
with slashes (``hybriddeid/batch.py``) follows too. ``from hybriddeid import batch`` is listed, never rewritten:
its names may come from different folders. The old paths still import, with a DeprecationWarning, so this is
for code to stop meeting that warning (and for branches written before the move). A line that says
``old path on purpose`` (a test of the old paths) is left as it is.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hybriddeid import _moved  # noqa: E402

MOVED = _moved.MOVED

SUFFIXES = (".py", ".md", ".ipynb", ".toml", ".sh")
_OLD = sorted(MOVED, key=len, reverse=True)  # "hybriddeid.evaluation.sweep" before any shorter prefix
DOTTED = re.compile(r"(?<![\w.])({})(?!\w)".format("|".join(re.escape(old) for old in _OLD)))
SLASHED = re.compile(r"(?<![\w./])({})\.py\b".format("|".join(re.escape(old.replace(".", "/")) for old in _OLD)))
OLD_NAMES = {old.rpartition(".")[2] for old in MOVED if old.count(".") == 1}
ON_PURPOSE = "old path on purpose"


def rewritten(text: str) -> str:
    """``text`` with every old dotted or slashed module path replaced by its new one (but on lines that say
    ``ON_PURPOSE``)."""

    def line_rewritten(line: str) -> str:
        if ON_PURPOSE in line:
            return line
        line = DOTTED.sub(lambda match: MOVED[match.group(1)], line)
        return SLASHED.sub(lambda match: MOVED[match.group(1).replace("/", ".")].replace(".", "/") + ".py", line)

    return "".join(line_rewritten(line) for line in text.splitlines(keepends=True))


def from_package_imports(text: str) -> list[int]:
    """Line numbers of ``from hybriddeid import <old module>`` in Python source (none if it does not parse)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module == "hybriddeid"
        and not node.level
        and any(alias.name in OLD_NAMES for alias in node.names)
    ]


def files_under(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(
                p
                for p in path.rglob("*")
                if p.suffix in SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        else:
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="files or folders")
    parser.add_argument("--check", action="store_true", help="list what would change, change nothing")
    args = parser.parse_args(argv)
    changed = 0
    for path in files_under(args.paths):
        if path.resolve() in (Path(_moved.__file__).resolve(), Path(__file__).resolve()):
            continue  # the table, and this script's own examples
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{path}: skipped, cannot be read as UTF-8 text ({type(exc).__name__})", file=sys.stderr)
            continue
        new = rewritten(text)
        lines = from_package_imports(text) if path.suffix == ".py" else []
        for line in lines:
            print(f"{path}:{line}: `from hybriddeid import` of a moved module: rewrite it by hand")
        if new != text:
            changed += 1
            print(f"{path}: {'would rewrite' if args.check else 'rewritten'}")
            if not args.check:
                path.write_text(new, encoding="utf-8")
        changed += bool(lines)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
