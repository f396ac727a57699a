"""The package version, in a module of its own so that any layer can read it without importing
the package's public API (``hybriddeid/__init__.py`` reaches up to the pipeline)."""

__version__ = "0.1.0"
