"""Optional classifier backends, found through the ``hybriddeid.classifiers`` entry-point group.

A backend's entry point names a light ``ComponentPlugin``: the defaults of its config section and
where its classifier class lives. Discovering plugins loads only that object, so the core never
imports a backend's heavy dependencies (PyTorch) unless a pipeline actually uses the component.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, Mapping

ENTRY_POINT_GROUP = "hybriddeid.classifiers"


class PluginUnavailable(ImportError):
    """A plugin is registered but its dependencies are not installed."""


@dataclass(frozen=True)
class ComponentPlugin:
    """What the core needs to know about a backend before importing it."""

    class_path: str  # "package.module:ClassName", imported only when the component is built or loaded
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the component's config section
    install_hint: str = ""  # shown when the class cannot be imported

    def component_class(self) -> type:
        """The classifier class (imports the backend and its dependencies)."""
        module_name, _, class_name = self.class_path.partition(":")
        try:
            return getattr(import_module(module_name), class_name)
        except ImportError as exc:
            raise PluginUnavailable(f"{self.class_path} cannot be imported ({exc.name} missing); {self.install_hint}") from None


@lru_cache(maxsize=None)
def plugin_names() -> tuple[str, ...]:
    """Names of the installed backends' components (entry points are read once per process)."""
    return tuple(sorted({point.name for point in entry_points(group=ENTRY_POINT_GROUP)}))


@lru_cache(maxsize=None)
def find_plugin(name: str) -> ComponentPlugin | None:
    """The registered plugin called ``name``, or None when no installed backend provides it."""
    if name not in plugin_names():
        return None
    point = next(point for point in entry_points(group=ENTRY_POINT_GROUP) if point.name == name)
    plugin = point.load()
    if not isinstance(plugin, ComponentPlugin):
        raise TypeError(f"entry point {name!r} in {ENTRY_POINT_GROUP} must name a ComponentPlugin")
    return plugin
