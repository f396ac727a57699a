"""crfsuite's own model files: train into bytes, tag from bytes (nothing is ever unpickled)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pycrfsuite


def train_to_bytes(trainer: pycrfsuite.Trainer) -> bytes:
    """Run crfsuite training (it writes a file) and return the model file's bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        model_path = os.path.join(tmp, "model.crfsuite")
        trainer.train(model_path)
        return Path(model_path).read_bytes()


def open_tagger(data: bytes) -> pycrfsuite.Tagger:
    """A crfsuite tagger over an in-memory model (crfsuite's own format: nothing is unpickled)."""
    tagger = pycrfsuite.Tagger()
    tagger.open_inmemory(data)
    return tagger
