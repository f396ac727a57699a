"""Bundled trained models (the default model lives in ``default/``)."""
