"""Optional classifier backends (``neural``): each registers a ``ComponentSpec`` in the
``hybriddeid.classifiers`` entry-point group (``hybriddeid.core.registry``), so the core never imports
a backend's heavy dependencies (PyTorch) unless a pipeline uses the component.
"""

from __future__ import annotations

from hybriddeid.core.registry import ComponentSpec

ComponentPlugin = ComponentSpec  # the name plugins written for hybriddeid 0.1 import
