"""crfsuite's own model files: train into bytes, tag from bytes (nothing is ever unpickled)."""

from __future__ import annotations

import itertools
import os
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pycrfsuite


def train_to_bytes(trainer: pycrfsuite.Trainer) -> bytes:
    """Run crfsuite training (it writes a file) and return the model file's bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        model_path = os.path.join(tmp, "model.crfsuite")
        trainer.train(model_path)
        return Path(model_path).read_bytes()


def open_tagger(data: bytes) -> pycrfsuite.Tagger:
    """A crfsuite tagger over an in-memory model (crfsuite's own format: nothing is unpickled).
    crfsuite reads the model from ``data`` without copying it: the caller keeps ``data`` alive
    as long as the tagger."""
    tagger = pycrfsuite.Tagger()
    tagger.open_inmemory(data)
    return tagger


# crfsuite's CRF1d model file (crfsuite's crf1d_model.c): a header, then chunks. All integers
# are little-endian uint32; the FEAT chunk lists every feature as (type, source, destination,
# weight as a float64); the label and attribute names are CQDB chunks whose "backward" array
# gives each id's record (id, size, name with a trailing NUL).
_HEADER = struct.Struct("<4sI4sIIIIIIIII")
_CQDB_HEADER = struct.Struct("<4sIIIII")
_FEATURE = np.dtype([("type", "<u4"), ("source", "<u4"), ("destination", "<u4"), ("weight", "<f8")])
STATE_FEATURE, TRANSITION_FEATURE = 0, 1


@dataclass(frozen=True)
class CRFWeights:
    """A crfsuite model's exact weights as arrays, read from its file (no tagger involved).

    ``state`` has one row per attribute plus a last row of zeros (``none``), so an attribute the
    model does not know can be looked up as ``none`` and add nothing; ``transitions[i, j]`` is the
    weight of label ``i`` followed by label ``j``. Labels are in crfsuite's id order."""

    labels: tuple[str, ...]
    attribute_ids: dict[str, int]
    state: np.ndarray
    transitions: np.ndarray

    @property
    def none(self) -> int:
        """The row of ``state`` that holds zeros: the id of any attribute the model lacks."""
        return len(self.state) - 1

    def attribute_id(self, name: str) -> int:
        """``name``'s row in ``state`` (``none`` if unknown). crfsuite reads names as C strings,
        so a name holding a NUL is looked up as its part before the NUL, as crfsuite does."""
        if "\x00" in name:
            name = name.split("\x00", 1)[0]
        return self.attribute_ids.get(name, len(self.state) - 1)

    def attribute_ids_of(self, names: Sequence[str]) -> list[int]:
        """``attribute_id`` of each name, looked up in one pass (no Python call per name unless a
        name holds a NUL): what the fast engine's caches use when they meet new forms."""
        if "\x00" in "".join(names):
            return [self.attribute_id(name) for name in names]
        return list(map(self.attribute_ids.get, names, itertools.repeat(len(self.state) - 1, len(names))))

    def emissions(self, features: Sequence[Sequence[str]]) -> np.ndarray:
        """Each position's score for each label from its feature strings (each counts 1.0, as
        crfsuite counts a string attribute): the generic path, for features that have no id path."""
        rows = [[self.attribute_id(name) for name in names] for names in features]
        lengths = np.fromiter((len(row) for row in rows), np.int64, len(rows))
        ids = np.fromiter((i for row in rows for i in row), np.int64, int(lengths.sum()))
        out = np.zeros((len(rows), self.state.shape[1]))
        np.add.at(out, np.repeat(np.arange(len(rows)), lengths), self.state[ids])
        return out


def _cqdb_names(data: bytes, offset: int, what: str) -> list[str]:
    """The names of a CQDB chunk at ``offset``, in id order."""
    magic, _, _, _, count, backward = _CQDB_HEADER.unpack_from(data, offset)
    if magic != b"CQDB":
        raise ValueError(f"not a crfsuite model: its {what} table is damaged")
    records = np.frombuffer(data, "<u4", count, offset + backward)
    names: list[str] = [""] * count
    for record in records.tolist():
        start = offset + record
        ident, size = struct.unpack_from("<II", data, start)
        names[ident] = data[start + 8 : start + 8 + size - 1].decode("utf-8")
    return names


def read_weights(data: bytes) -> CRFWeights:
    """The weights of the crfsuite model file ``data`` (bytes as ``train_to_bytes`` returns).

    crfsuite's own dump prints weights to six decimals; reading the file keeps every bit, so
    scores computed from these arrays match crfsuite's own."""
    if len(data) < _HEADER.size:
        raise ValueError("not a crfsuite model: the file is too short")
    magic, _, kind, _, _, n_labels, n_attributes, features_at, labels_at, attributes_at, _, _ = _HEADER.unpack_from(
        data, 0
    )
    if magic != b"lCRF" or kind != b"FOMC":
        raise ValueError("not a crfsuite CRF1d model file")
    labels = _cqdb_names(data, labels_at, "label")
    attributes = _cqdb_names(data, attributes_at, "attribute")
    if len(labels) != n_labels or len(attributes) != n_attributes:
        raise ValueError("not a crfsuite model: its header and name tables disagree")
    chunk, _, n_features = struct.unpack_from("<4sII", data, features_at)
    if chunk != b"FEAT":
        raise ValueError("not a crfsuite model: its feature table is damaged")
    features = np.frombuffer(data, _FEATURE, n_features, features_at + 12)
    state = np.zeros((n_attributes + 1, n_labels))
    transitions = np.zeros((n_labels, n_labels))
    is_state = features["type"] == STATE_FEATURE
    is_transition = features["type"] == TRANSITION_FEATURE
    # += (not =): a pair listed twice counts twice, as crfsuite sums every feature it finds
    np.add.at(state, (features["source"][is_state], features["destination"][is_state]), features["weight"][is_state])
    np.add.at(
        transitions,
        (features["source"][is_transition], features["destination"][is_transition]),
        features["weight"][is_transition],
    )
    return CRFWeights(tuple(labels), {name: i for i, name in enumerate(attributes)}, state, transitions)


def emission_model(weights: CRFWeights) -> bytes:
    """A crfsuite model that tags from emission scores: the labels and transition weights of
    ``weights``, and one attribute per label (named by its index) whose only weight, 1.0, is on
    that label. An item ``{"0": e0, "1": e1, ...}`` then scores label j exactly e_j (crfsuite
    multiplies each attribute's value by its weights), so crfsuite's own Viterbi and
    forward-backward run on scores computed elsewhere (the fast engine's, from cached ids) with
    none of crfsuite's string handling.

    crfsuite has no API to write weights, so a trainer writes the file (every transition is
    generated, each label's attribute observed once) and the weights are then set in its FEAT
    chunk; the result is checked by reading it back."""
    n_labels = len(weights.labels)
    trainer = pycrfsuite.Trainer(algorithm="lbfgs", verbose=False)
    trainer.set_params(
        {
            "feature.possible_transitions": True,
            "feature.possible_states": False,
            "c1": 0.0,
            "c2": 1.0,
            "max_iterations": 50,
        }
    )
    trainer.append([[str(j)] for j in range(n_labels)], list(weights.labels))  # label ids in this order
    data = bytearray(train_to_bytes(trainer))
    _, _, _, _, _, _, _, features_at, _, attributes_at, _, _ = _HEADER.unpack_from(data, 0)
    attributes = _cqdb_names(bytes(data), attributes_at, "attribute")
    n_features = struct.unpack_from("<I", data, features_at + 8)[0]
    features = np.frombuffer(data, _FEATURE, n_features, features_at + 12).copy()
    is_state = features["type"] == STATE_FEATURE
    is_transition = features["type"] == TRANSITION_FEATURE
    features["weight"][is_state] = 1.0
    features["weight"][is_transition] = weights.transitions[
        features["source"][is_transition], features["destination"][is_transition]
    ]
    data[features_at + 12 : features_at + 12 + features.nbytes] = features.tobytes()
    made = read_weights(bytes(data))
    expected_state = np.zeros((n_labels + 1, n_labels))
    expected_state[[made.attribute_ids[str(j)] for j in range(n_labels)], np.arange(n_labels)] = 1.0
    if (
        made.labels != weights.labels
        or len(attributes) != n_labels
        or not np.array_equal(made.state, expected_state)
        or not np.array_equal(made.transitions, weights.transitions)
    ):
        raise ValueError('could not build the emission model of a crfsuite model (use engine = "crfsuite")')
    return bytes(data)
