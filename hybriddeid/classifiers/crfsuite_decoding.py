"""crfsuite's own Viterbi and forward-backward, run on emission scores computed elsewhere.

The fast engine sums each unit's label scores itself (from ``crfsuite_files.read_weights``) and
needs them decoded exactly as crfsuite decodes: the same recursions, the same tie-breaking, the
same scaled forward-backward. crfsuite's C decoding functions (crf1d_context.c: ``crf1dc_new``,
``crf1dc_viterbi``, ``crf1dc_marginals``...) are exported by python-crfsuite's extension module,
so they are called here through ctypes on a context whose state scores are copied in from numpy:
no strings, no per-item conversion, no compiler, no new dependency.

That relies on crfsuite's context layout (``crf1d_context_t`` in crfsuite's crf1d.h, unchanged
since crfsuite 0.12), so every decoder checks itself when built against crfsuite's tagger on an
emission model (``crfsuite_files.emission_model``); where the symbols are missing (a build that
does not export them) or the check fails, decoding goes through that tagger instead: slower
(every score passes through a dict and crfsuite's attribute lookup), never different.
"""

from __future__ import annotations

import ctypes
import logging
import random
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import pycrfsuite

from hybriddeid.classifiers.crfsuite_files import CRFWeights, emission_model, open_tagger
from hybriddeid.classifiers.schemes import OUTSIDE

log = logging.getLogger(__name__)

_DOUBLE_P = ctypes.POINTER(ctypes.c_double)
_CONTEXT_VITERBI_AND_MARGINALS = 0x01 | 0x02  # CTXF_VITERBI | CTXF_MARGINALS
_RESET_TRANSITIONS = 0x02  # RF_TRANS
# A path whose probability is above this is more probable than every other path put together, so it is
# the Viterbi path: decoding may skip Viterbi. 0.51, not 0.5: the margin keeps rounding in the scores and
# the normaliser from ever deciding a near tie.
_SURE_PATH = 0.51


class _Context(ctypes.Structure):
    """crfsuite's ``crf1d_context_t``: sizes, then [T][L], [L][L] and [T] arrays of doubles."""

    _fields_ = [
        ("flag", ctypes.c_int),
        ("num_labels", ctypes.c_int),
        ("num_items", ctypes.c_int),
        ("cap_items", ctypes.c_int),
        ("log_norm", ctypes.c_double),
        ("state", _DOUBLE_P),
        ("trans", _DOUBLE_P),
        ("alpha_score", _DOUBLE_P),
        ("beta_score", _DOUBLE_P),
        ("scale_factor", _DOUBLE_P),
        ("row", _DOUBLE_P),
        ("backward_edge", ctypes.POINTER(ctypes.c_int)),
        ("exp_state", _DOUBLE_P),
        ("exp_trans", _DOUBLE_P),
        ("mexp_state", _DOUBLE_P),
        ("mexp_trans", _DOUBLE_P),
    ]


def _crfsuite_library() -> ctypes.CDLL | None:
    """python-crfsuite's extension with its crf1dc_* functions typed, or None if it lacks them."""
    try:
        library = ctypes.CDLL(pycrfsuite._pycrfsuite.__file__)
        context_p = ctypes.POINTER(_Context)
        library.crf1dc_new.restype = context_p
        library.crf1dc_new.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        library.crf1dc_set_num_items.restype = ctypes.c_int
        library.crf1dc_set_num_items.argtypes = [context_p, ctypes.c_int]
        library.crf1dc_reset.argtypes = [context_p, ctypes.c_int]
        library.crf1dc_viterbi.restype = ctypes.c_double
        library.crf1dc_viterbi.argtypes = [context_p, ctypes.POINTER(ctypes.c_int)]
        for name in (
            "crf1dc_delete",
            "crf1dc_exp_transition",
            "crf1dc_exp_state",
            "crf1dc_alpha_score",
            "crf1dc_beta_score",
        ):
            getattr(library, name).argtypes = [context_p]
            getattr(library, name).restype = None
        return library
    except (OSError, AttributeError):
        return None


_LIBRARY = _crfsuite_library()


class Marginals(Protocol):
    """A decoded sequence's marginal probabilities: ``m(tag, i)`` for one unit, ``column(tag)``
    for every unit (focus reads P(O) of all), ``span_scores(window, first)`` for a stretch of
    tags from unit ``first`` on (each unit's own tag's marginal, 1.0 for O: span scores)."""

    def __call__(self, tag: str, i: int) -> float: ...

    def column(self, tag: str) -> list[float]: ...

    def span_scores(self, window: Sequence[str], first: int) -> list[float]: ...


class UnitMarginals:
    """``Marginals`` read through a ``marginal(tag, i)`` function one unit at a time (crfsuite's
    tagger, segments stitched from several readings)."""

    __slots__ = ("marginal", "n_items")

    def __init__(self, marginal: Callable[[str, int], float], n_items: int) -> None:
        self.marginal = marginal
        self.n_items = n_items

    def __call__(self, tag: str, i: int) -> float:
        return self.marginal(tag, i)

    def column(self, tag: str) -> list[float]:
        return [self.marginal(tag, i) for i in range(self.n_items)]

    def span_scores(self, window: Sequence[str], first: int) -> list[float]:
        return [1.0 if tag == OUTSIDE else self.marginal(tag, first + i) for i, tag in enumerate(window)]


class _TableMarginals:
    """``Marginals`` from a units x labels table computed at the first read."""

    __slots__ = ("_compute", "_columns", "_table")

    def __init__(self, compute: Callable[[], np.ndarray], columns: dict[str, int]) -> None:
        self._compute = compute
        self._columns = columns
        self._table: np.ndarray | None = None

    def table(self) -> np.ndarray:
        if self._table is None:
            self._table = self._compute()
        return self._table

    def __call__(self, tag: str, i: int) -> float:
        return float(self.table()[i, self._columns[tag]])

    def column(self, tag: str) -> list[float]:
        return self.table()[:, self._columns[tag]].tolist()

    def span_scores(self, window: Sequence[str], first: int) -> list[float]:
        rows = np.arange(first, first + len(window))
        own = self.table()[rows, [self._columns[tag] for tag in window]].tolist()
        return [1.0 if tag == OUTSIDE else p for tag, p in zip(window, own)]


class Decoder:
    """Decodes emission scores (units x labels, in ``weights.labels`` order) of one model."""

    def __init__(self, weights: CRFWeights, tagger: pycrfsuite.Tagger) -> None:
        """``tagger``: crfsuite's tagger over the same model, the reference the decoder checks
        itself against."""
        self.labels = weights.labels
        self.columns = {label: i for i, label in enumerate(weights.labels)}
        self._weights = weights
        self._context = None
        self._fallback: pycrfsuite.Tagger | None = None
        self._names = [str(j) for j in range(len(self.labels))]
        if _LIBRARY is not None:
            self._lib = _LIBRARY  # what the context's calls go through (there is a context only with it)
            self._context = self._new_context(weights.transitions)
            if self._context is not None:
                self._fields = self._context.contents  # a live view of crfsuite's struct
                self._path = (ctypes.c_int * self._fields.cap_items)()
                self._arrays_cap = -1  # the capacity ``_arrays`` were made for
            if not self._agrees_with_crfsuite(tagger):
                log.warning(
                    "crfsuite's decoding functions do not behave as expected in this python-crfsuite "
                    "build; the fast engine decodes through crfsuite's tagger instead (slower, same results)"
                )
                self._release()

    def _new_context(self, transitions: np.ndarray):
        n_labels = len(self.labels)
        context = self._lib.crf1dc_new(_CONTEXT_VITERBI_AND_MARGINALS, n_labels, 1)
        if not context or context.contents.num_labels != n_labels:
            return None
        self._lib.crf1dc_reset(context, _RESET_TRANSITIONS)
        trans = np.ctypeslib.as_array(context.contents.trans, shape=(n_labels * n_labels,))
        trans[:] = np.ascontiguousarray(transitions, dtype=np.float64).ravel()
        self._lib.crf1dc_exp_transition(context)
        return context

    def _agrees_with_crfsuite(self, tagger: pycrfsuite.Tagger) -> bool:
        """Whether this build's context decodes as crfsuite's tagger does, on sequences of the
        model's own attributes drawn at random (the tagger reads their strings, the decoder
        their summed weights)."""
        if self._context is None:
            return False
        names = list(self._weights.attribute_ids)
        if not names:
            return True
        generator = random.Random(0)  # not numpy's: its import costs a run ~9 ms
        for length in (1, 2, 7, 40):
            features = [[names[generator.randrange(len(names))] for _ in range(12)] for _ in range(length)]
            tags, marginal = self.decode(self._weights.emissions(features))
            if tags != tagger.tag(features):
                return False
            for i in range(length):
                for label in self.labels:
                    if abs(marginal(label, i) - tagger.marginal(label, i)) > 1e-12:
                        return False
        return True

    def decode(self, emissions: np.ndarray, marginals_first: bool = False) -> tuple[list[str], Marginals]:
        """Viterbi tags and the sequence's marginals (forward-backward runs at their first read;
        valid until the next ``decode``).

        ``marginals_first``, for a caller that reads the marginals anyway (focus reads every unit's
        P(O)): forward-backward runs first, and where the path of each unit's most probable label has a
        probability above ``_SURE_PATH`` those are the tags, without a Viterbi pass (the same tags Viterbi
        gives: see there)."""
        if self._context is None:
            return self._decode_with_tagger(emissions)
        if marginals_first:
            return self._decode_marginals_first(emissions)
        n_items = len(emissions)
        self._load(emissions)
        tags = self._viterbi(n_items)
        return tags, _TableMarginals(lambda: self._state_marginals(n_items), self.columns)

    def _decode_marginals_first(self, emissions: np.ndarray) -> tuple[list[str], Marginals]:
        n_items = len(emissions)
        self._load(emissions)
        table = self._state_marginals(n_items)  # a copy: Viterbi below works in the alpha array
        marginals = _TableMarginals(lambda: table, self.columns)
        best = table.argmax(axis=1)
        unsure = float((1.0 - table[np.arange(n_items), best]).sum())  # P(path) >= 1 - this (a union bound)
        if unsure < 1.0 - _SURE_PATH or self._path_probability(best, n_items) > _SURE_PATH:
            labels = self.labels
            return [labels[i] for i in best.tolist()], marginals
        return self._viterbi(n_items), marginals

    def _path_probability(self, path: np.ndarray, n_items: int) -> float:
        """P(``path``) of the loaded sequence: its state and transition scores less crfsuite's log
        normaliser (set by the forward pass ``_state_marginals`` ran)."""
        score = self._state[np.arange(n_items), path].sum() + self._weights.transitions[path[:-1], path[1:]].sum()
        return float(np.exp(score - self._fields.log_norm))

    def _load(self, emissions: np.ndarray) -> None:
        """The sequence's emission scores into crfsuite's state scores (float64)."""
        context, fields = self._context, self._fields
        if self._lib.crf1dc_set_num_items(context, len(emissions)) != 0:  # grows the arrays when needed
            raise MemoryError("crfsuite could not allocate a sequence this long")
        if self._arrays_cap != fields.cap_items:
            self._new_arrays()
        self._state[: len(emissions)] = emissions

    def _viterbi(self, n_items: int) -> list[str]:
        """crfsuite's Viterbi tags of the loaded sequence (it uses the alpha array as its work space)."""
        path = self._path
        self._lib.crf1dc_viterbi(self._context, path)
        labels = self.labels
        return [labels[i] for i in path[:n_items]]

    def _new_arrays(self) -> None:
        """Numpy views of the context's state, alpha, beta and scale arrays (and a path as long), made
        again whenever ``crf1dc_set_num_items`` has grown them (the only time they move): a sequence then
        costs no copies in or out but the scores and the marginals' product."""
        fields = self._fields
        cap, n_labels = fields.cap_items, fields.num_labels
        if len(self._path) < cap:
            self._path = (ctypes.c_int * cap)()
        self._state, self._alpha, self._beta = (
            np.ctypeslib.as_array(pointer, shape=(cap, n_labels))
            for pointer in (fields.state, fields.alpha_score, fields.beta_score)
        )
        self._scale = np.ctypeslib.as_array(fields.scale_factor, shape=(cap,))
        self._arrays_cap = cap

    def _state_marginals(self, n_items: int) -> np.ndarray:
        """P(label at t) for every t, as crfsuite's crf1dc_marginals computes it (alpha x beta x
        1 / scale, in that order, so the same bits), without its transition marginals, which
        cost as much again and are never read."""
        context = self._context
        for step in (self._lib.crf1dc_exp_state, self._lib.crf1dc_alpha_score, self._lib.crf1dc_beta_score):
            step(context)
        alpha = self._alpha[:n_items] * self._beta[:n_items]
        alpha *= (1.0 / self._scale[:n_items])[:, None]
        return alpha

    def _decode_with_tagger(self, emissions: np.ndarray) -> tuple[list[str], Marginals]:
        if self._fallback is None:  # built only where it is needed
            # crfsuite reads the emission model from these bytes without copying them: they stay here
            self._fallback_model = emission_model(self._weights)
            self._fallback = open_tagger(self._fallback_model)
        tagger, names = self._fallback, self._names
        tagger.set([dict(zip(names, row)) for row in emissions.tolist()])
        return tagger.tag(), UnitMarginals(tagger.marginal, len(emissions))

    def _release(self) -> None:
        if self._context is not None and _LIBRARY is not None:
            _LIBRARY.crf1dc_delete(self._context)
        self._context = None

    def __del__(self) -> None:
        self._release()
