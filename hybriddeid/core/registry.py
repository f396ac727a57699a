"""The component registry: every classifier a pipeline can list, built-in or plugin, by name.

Components are found through the ``hybriddeid.classifiers`` entry-point group: the built-ins
(``rule``, ``char``, ``token``) are registered there by this package's own ``setup.cfg``, and an
installed backend (``neural``) or a third-party package registers the same way. ``register`` adds
one at run time (a notebook, a test). An entry point names a light ``ComponentSpec``: the
defaults of its config section, what the pipeline may ask of it, and where its class lives, so
listing components never imports a backend's heavy dependencies (PyTorch).

Adding a classifier: write its module (a class following ``classifiers.base.Classifier`` plus a
``ComponentSpec``) and register that spec (an entry point, or ``register``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from typing import Any

ENTRY_POINT_GROUP = "hybriddeid.classifiers"


class PluginUnavailable(ImportError):
    """A component is registered but its dependencies are not installed."""


@dataclass(frozen=True)
class ComponentSpec:
    """What the pipeline needs to know about a component before importing it."""

    class_path: str  # "package.module:ClassName", imported only when the component is built or loaded
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the component's config section
    install_hint: str = ""  # shown when the class cannot be imported
    # Capabilities the pipeline uses (see classifiers.base): predict(note, regions=...) reads only
    # the given stretches (it can be focused); read()/predict_with_focus() give marginals (it can
    # focus another and serve P(O) thresholds).
    accepts_regions: bool = False
    reads_marginals: bool = False
    # Fit in a forked worker process beside the others (crfsuite releases nothing to share); a
    # component whose library keeps its own threads (PyTorch) fits in the calling process.
    fits_in_worker: bool = False
    # Problems with a config section (e.g. unknown feature names), checked when a config is built.
    check: Callable[[Mapping[str, Any]], list[str]] | None = None

    def component_class(self) -> type[Any]:
        """The classifier class (imports the component's module and its dependencies)."""
        module_name, _, class_name = self.class_path.partition(":")
        try:
            return getattr(import_module(module_name), class_name)
        except ImportError as exc:
            raise PluginUnavailable(
                f"{self.class_path} cannot be imported ({exc.name} missing); {self.install_hint}"
            ) from None


_added: dict[str, ComponentSpec] = {}  # by register(), on top of the entry points


@cache
def _entry_points() -> dict[str, EntryPoint]:
    """The group's entry points by name, read once: each ``entry_points()`` call reads every installed
    distribution's metadata (5-15 ms), and loading a model looks up each of its components."""
    points: dict[str, EntryPoint] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        points.setdefault(point.name, point)  # two distributions naming one component: the first found
    return points


def _entry_point_names() -> tuple[str, ...]:
    return tuple(sorted(_entry_points()))


@cache
def _from_entry_point(name: str) -> ComponentSpec:
    spec = _entry_points()[name].load()
    if not isinstance(spec, ComponentSpec):
        raise TypeError(f"entry point {name!r} in {ENTRY_POINT_GROUP} must name a ComponentSpec")
    return spec


def component_names() -> tuple[str, ...]:
    """Every registered component's name, sorted."""
    return tuple(sorted({*_entry_point_names(), *_added}))


def find_component(name: str) -> ComponentSpec | None:
    """The component registered as ``name``, or None."""
    if name in _added:
        return _added[name]
    return _from_entry_point(name) if name in _entry_points() else None


def get_component(name: str) -> ComponentSpec:
    """The component registered as ``name``; a KeyError lists the known ones otherwise."""
    spec = find_component(name)
    if spec is None:
        raise KeyError(f"no classifier called {name!r}; known: {list(component_names())}")
    return spec


def register(name: str, spec: ComponentSpec, replace: bool = False) -> None:
    """Make ``spec`` available as component ``name`` in this process (``replace``: over an existing one)."""
    if not isinstance(spec, ComponentSpec):
        raise TypeError("register() takes a ComponentSpec")
    if not replace and find_component(name) is not None:
        raise ValueError(f"a component called {name!r} is already registered")
    _added[name] = spec


def unregister(name: str) -> None:
    """Remove a component added by ``register`` (entry points stay)."""
    _added.pop(name, None)
