"""hybriddeid: hybrid (token CRF + character CRF + rules) de-identification of clinical notes."""

from __future__ import annotations

from hybriddeid import _moved
from hybriddeid._version import __version__
from hybriddeid.core.document import Document, Span

_moved.install()  # the module paths from before the layer folders still import, with a DeprecationWarning

__all__ = ["Document", "Pipeline", "Span", "__version__"]


def __getattr__(name: str):
    # Imported lazily so that `import hybriddeid` stays cheap for readers and evaluators.
    if name == "Pipeline":
        from hybriddeid.pipeline import Pipeline

        return Pipeline
    raise AttributeError(name)
