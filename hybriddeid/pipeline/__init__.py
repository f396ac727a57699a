"""Layer 3, the pipeline: the components run and merged (``core``: :class:`Pipeline`, its config and
saved models), P(O) thresholds (``operating_point``), threshold sweeps (``sweep``), ablations
(``ablation``) and the shipped recipes (``recipes``).

``from hybriddeid.pipeline import Pipeline`` is the documented path; the names below are those of
``hybriddeid.pipeline`` before it became a package, re-exported from ``core``.
"""

from hybriddeid.pipeline.core import (
    BUNDLED_MODELS,
    CASES,
    CONFIG_FILE,
    DEFAULT_BUNDLED,
    DEFAULT_MODEL,
    LINK_MIN_SCORE,
    META_FILE,
    PIPELINE_DEFAULTS,
    RESOURCE_PATH_KEYS,
    ConfigError,
    Pipeline,
    build_component,
    build_config,
    case_copies,
    component_params,
    config_overrides,
    flattened_copies,
    label_words,
    load_component,
    load_config,
    model_folder,
    model_language,
    name_like,
    unseen_labels,
    warn_unseen_labels,
)

__all__ = [
    "BUNDLED_MODELS",
    "CASES",
    "CONFIG_FILE",
    "DEFAULT_BUNDLED",
    "DEFAULT_MODEL",
    "LINK_MIN_SCORE",
    "META_FILE",
    "PIPELINE_DEFAULTS",
    "RESOURCE_PATH_KEYS",
    "ConfigError",
    "Pipeline",
    "build_component",
    "build_config",
    "case_copies",
    "component_params",
    "config_overrides",
    "flattened_copies",
    "label_words",
    "load_component",
    "load_config",
    "model_folder",
    "model_language",
    "name_like",
    "unseen_labels",
    "warn_unseen_labels",
]
