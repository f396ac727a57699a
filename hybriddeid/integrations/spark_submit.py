"""The ``spark-submit`` entry point: ``spark-submit .../spark_submit.py ARGS`` (or ``python -m
hybriddeid.integrations.spark_submit ARGS``) is ``hybriddeid spark-deid ARGS``.

It sits on top of the command line (``hybriddeid.cli``), which runs ``hybriddeid.integrations.spark``:
that module is imported by name, never run as ``__main__``, so the pandas functions Spark ships are
pickled by reference to it (and to its per-process model cache).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hybriddeid spark-deid`` with ``argv`` (default: this process's arguments)."""
    from hybriddeid.cli import main as cli_main

    return cli_main(["spark-deid", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
