"""The module paths hybriddeid had before its layer folders, importable for one more release.

``import hybriddeid.batch`` (or ``from hybriddeid.batch import run_batch``) imports the module's new
home, ``hybriddeid.runs.batch``, warns once with a ``DeprecationWarning`` naming it, and binds the old
name to that same module object, so attributes, monkeypatching and ``isinstance`` see one module. No
file sits at an old path: the top of the package holds only the public entry points and the layer
folders. The package root installs the finder (:func:`install`) when it is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

# old module path -> new module path
MOVED: dict[str, str] = {
    "hybriddeid.document": "hybriddeid.core.document",
    "hybriddeid.taxonomy": "hybriddeid.core.taxonomy",
    "hybriddeid.profiles": "hybriddeid.core.profiles",
    "hybriddeid.merge": "hybriddeid.core.merge",
    "hybriddeid.languages": "hybriddeid.core.languages",
    "hybriddeid.registry": "hybriddeid.core.registry",
    "hybriddeid.analysis": "hybriddeid.features.analysis",
    "hybriddeid.risk": "hybriddeid.evaluation.risk",
    "hybriddeid.safelist": "hybriddeid.classifiers.safelist",
    "hybriddeid.operating_point": "hybriddeid.pipeline.operating_point",
    "hybriddeid.recipes": "hybriddeid.pipeline.recipes",
    "hybriddeid.ablation": "hybriddeid.pipeline.ablation",
    "hybriddeid.evaluation.sweep": "hybriddeid.pipeline.sweep",
    "hybriddeid.processing": "hybriddeid.runs.processing",
    "hybriddeid.batch": "hybriddeid.runs.batch",
    "hybriddeid.renaming": "hybriddeid.runs.renaming",
    "hybriddeid.deid_batch": "hybriddeid.runs.deid",
    "hybriddeid.table_batch": "hybriddeid.runs.tables",
    "hybriddeid.fhir_deid": "hybriddeid.runs.fhir",
    "hybriddeid.run_report": "hybriddeid.runs.report",
    "hybriddeid.reviewing": "hybriddeid.review.folders",
    "hybriddeid.review_server": "hybriddeid.review.server",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of ``MOVED`` and loads each as its new module."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # a placeholder module; exec_module puts the real one in its place

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {new}; import it from there (the old path goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        # The import system returns what sys.modules holds under the name once this returns.
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Put the finder first in ``sys.meta_path``, once: an old path always means its new module, even
    where a stale file (an older install, an editable install's other checkout) still sits there."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
