"""The neural plugin without PyTorch: entry-point discovery, its config section, text skeletons."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from importlib.metadata import entry_points

import pytest

from hybriddeid.backends.neural import NEURAL_DEFAULTS, PLUGIN, NeuralSettings
from hybriddeid.backends.neural.encoding import (
    RETURN,
    UNK,
    digit_form,
    note_tokens,
    skeleton,
    skeleton_threshold,
    skeleton_vocabulary,
)
from hybriddeid.core.document import Document
from hybriddeid.core.registry import ENTRY_POINT_GROUP, PluginUnavailable
from hybriddeid.core.registry import find_component as find_plugin
from hybriddeid.features.analysis import analyse
from hybriddeid.pipeline.core import ConfigError, build_config


def test_the_plugin_is_registered_as_an_entry_point():
    assert "neural" in {point.name for point in entry_points(group=ENTRY_POINT_GROUP)}
    assert find_plugin("neural") is PLUGIN
    assert find_plugin("no-such-component") is None


def test_config_gains_the_neural_section_only_when_asked():
    assert "neural" not in build_config()
    config = build_config(
        {
            "pipeline": {"components": ["rule", "neural"], "precedence": ["neural", "rule"]},
            "neural": {"architecture": "tsgru"},
        }
    )
    assert config["neural"] == {**NEURAL_DEFAULTS, "architecture": "tsgru"}
    assert build_config({"neural": {"epochs": 2}})["neural"]["epochs"] == 2  # a section alone is fine too
    with pytest.raises(ConfigError, match="unknown key"):
        build_config({"neural": {"epoch": 2}})
    with pytest.raises(ValueError, match="architecture"):
        NeuralSettings(architecture="transformer")
    for key in ("batch_size", "predict_batch_size", "epochs", "ngram"):
        with pytest.raises(ValueError, match=key):
            NeuralSettings(**{key: 0})


def test_core_never_imports_torch_and_explains_a_missing_torch():
    """With torch made unimportable, configs still validate and building the component says what to install."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from hybriddeid.pipeline.core import Pipeline, build_component\n"
        "p = Pipeline({'pipeline': {'components': ['rule', 'neural']}})\n"
        "try:\n    build_component('neural', p.config)\nexcept ImportError as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith(PluginUnavailable.__name__) and "hybriddeid[neural]" in out
    code = "import sys, hybriddeid.pipeline.core, hybriddeid.backends.neural; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_skeleton_threshold_follows_equation_4():
    # 10 word types: a x5, b x3, c x3, seven words once. Words seen >= t: t=1: 10, t=2..3: 3, t=4..5: 1.
    counts = Counter({"a": 5, "b": 3, "c": 3, **{w: 1 for w in "defghij"}})
    assert skeleton_threshold(counts, 0.3) == 2  # |3 - 3| = 0 at t = 2 and 3; the smaller wins
    assert skeleton_vocabulary(counts, 0.3) == {"a", "b", "c"}
    assert skeleton_threshold(counts, 0.1) == 4  # |1 - 1| = 0
    assert skeleton_threshold(counts, 0.9) == 1  # |10 - 9| = 1 beats |3 - 9| = 6


def test_skeleton_of_the_papers_figure_3():
    kept = frozenset({"Mr", ".", "was", "seen", "by", "me", "in", "with", "Dr"})
    words = ["Mr", ".", "HESS", "was", "seen", "by", "me", "in", "BCH", "with", "Dr", ".", "Whittaker", RETURN]
    assert skeleton(words, kept) == [
        "Mr",
        ".",
        UNK,
        "was",
        "seen",
        "by",
        "me",
        "in",
        UNK,
        "with",
        "Dr",
        ".",
        UNK,
        RETURN,
    ]


def test_digits_become_digit_and_lines_are_joined_by_a_return_marker():
    assert digit_form("46") == "DIGITDIGIT" and digit_form("año2") == "añoDIGIT"
    text = "Nombre: Ana.\n\nEdad: 46 años\n"
    note = note_tokens(analyse(Document("n", text), "es"))
    assert note.words == ("Nombre", ":", "Ana", ".", RETURN, "Edad", ":", "46", "años")
    assert [note.words[p] for p in note.positions] == [text[s:e] for s, e in note.units]


def test_elman_and_jordan_take_paper_001s_settings_unless_told_otherwise():
    assert NEURAL_DEFAULTS["hidden_dim"] == 0 and NEURAL_DEFAULTS["optimizer"] == "auto"  # decided per architecture
    elman, jordan = NeuralSettings(architecture="elman"), NeuralSettings(architecture="jordan")
    assert (elman.hidden_dim, elman.window, elman.learning_rate, elman.optimizer) == (100, 11, 0.01, "sgd")  # Table 3
    assert (jordan.hidden_dim, jordan.window, jordan.learning_rate, jordan.optimizer) == (150, 9, 0.01, "sgd")
    assert elman.resolved("output") == jordan.resolved("output") == "softmax"
    bigru = NeuralSettings()  # the earlier architectures keep the values they had
    assert (bigru.hidden_dim, bigru.window, bigru.learning_rate, bigru.optimizer) == (128, 7, 0.002, "adam")
    assert NeuralSettings(architecture="jordan", hidden_dim=20, window=3).to_dict()["hidden_dim"] == 20
    assert NeuralSettings(**NeuralSettings(architecture="elman").to_dict()) == elman  # saved params reload as they were
    assert not NeuralSettings(architecture="cedi").suffixes  # paper 002 §2.5: prefixes only
    with pytest.raises(ValueError, match="window"):
        NeuralSettings(architecture="elman", window=4)
