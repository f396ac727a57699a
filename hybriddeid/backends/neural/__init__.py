"""Neural taggers (bi-GRU/bi-LSTM + CRF, TS-GRU, CEDI, Elman and Jordan RNNs) as a pipeline component named "neural".

Registered through the ``hybriddeid.classifiers`` entry point as ``PLUGIN`` (``hybriddeid.core.registry``); this module and
``settings``/``encoding`` never import PyTorch, only ``tagger``, ``models`` and ``crf`` do
(``pip install "hybriddeid[neural]"``).
"""

from __future__ import annotations

from hybriddeid.backends.neural.settings import ARCHITECTURES, NEURAL_DEFAULTS, NeuralSettings
from hybriddeid.core.registry import ComponentSpec

PLUGIN = ComponentSpec(
    class_path="hybriddeid.backends.neural.tagger:NeuralTagger",
    defaults=NEURAL_DEFAULTS,
    install_hint='install the neural extra: pip install "hybriddeid[neural]"',
)

__all__ = ["ARCHITECTURES", "NEURAL_DEFAULTS", "PLUGIN", "NeuralSettings", "NeuralTagger"]


def __getattr__(name: str):
    if name == "NeuralTagger":  # imports torch
        return PLUGIN.component_class()
    raise AttributeError(name)
