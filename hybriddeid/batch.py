"""Batch runs over directories: one bad file never stops the others, outputs are written
atomically, inputs are never overwritten, and a rerun resumes by skipping finished outputs.

Only file names, counts and error descriptions (which never quote note text) are reported.
"""
from __future__ import annotations

import logging
from itertools import groupby
from operator import itemgetter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from tqdm import tqdm

from hybriddeid.document import Document
from hybriddeid.io import InputError, iter_documents, output_path, write_documents

log = logging.getLogger(__name__)

Transform = Callable[[Document], Document]


@dataclass
class BatchResult:
    """What a batch run did, by input file."""

    written: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0: all done; 1: some inputs failed; 2: nothing could be done."""
        if self.failed and not (self.written or self.skipped):
            return 2
        if not (self.written or self.skipped or self.failed):
            return 2
        return 1 if self.failed else 0

    def summary(self) -> str:
        return f"{len(self.written)} written, {len(self.skipped)} already done, {len(self.failed)} failed"


def run_batch(
    in_dir: Path,
    out_dir: Path,
    transform: Transform,
    out_format: str,
    in_format: str = "auto",
    overwrite: bool = False,
    progress: bool = True,
) -> BatchResult:
    """Apply ``transform`` to every document under ``in_dir`` and write the results to ``out_dir``.

    Files whose outputs all exist already are skipped unless ``overwrite``; errors are collected
    per input file and the run goes on.
    """
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    if not in_dir.is_dir():
        raise InputError(in_dir, "is not a directory")
    if out_dir.resolve() == in_dir.resolve():
        raise InputError(out_dir, "output directory must differ from the input directory")
    result = BatchResult()
    by_file = groupby(iter_documents(in_dir, in_format), key=itemgetter(0))  # lazy: one file in memory
    for path, group in tqdm(by_file, desc="files", unit="file", disable=not progress, leave=False):
        items = [item for _, item in group]
        errors = [item for item in items if isinstance(item, InputError)]
        if errors:
            _fail(result, path, errors[0].problem)
            continue
        docs: Sequence[Document] = items
        if not overwrite and all(output_path(doc, out_dir, out_format).exists() for doc in docs):
            result.skipped.append(path)
            continue
        try:
            outputs = [transform(doc) for doc in docs]
            write_documents(outputs, out_dir, out_format)
        except (InputError, ValueError, OSError) as exc:
            _fail(result, path, type(exc).__name__ + (f": {exc.problem}" if isinstance(exc, InputError) else ""))
            continue
        result.written.append(path)
    return result


def _fail(result: BatchResult, path: Path, problem: str) -> None:
    result.failed.append((path, problem))
    log.error("%s: %s", path.name, problem)
