"""Precision and recall over a grid of P(O) thresholds, and the choice of an operating point.

``run_sweep`` reads each gold note once with ``Pipeline.read`` (the CRFs tag it once, keeping
their marginals) and applies every threshold of the grid to what was kept, so the cost of a sweep
is one pipeline run plus the scoring. ``Sweep.choose`` is the one place where a recall target
becomes a threshold, and ``Sweep.caution`` the one place that judges what it costs: ``Sweep.pick``
(both, the caution logged as a warning) is what ``hybriddeid evaluate --sweep --recall-target``
prints and ``annotate`` / ``deid --recall-target --sweep-file`` apply.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybriddeid.core.document import Document
from hybriddeid.core.profiles import DEFAULT_PHI_SET
from hybriddeid.evaluation.report import PRF
from hybriddeid.evaluation.scorer import evaluate
from hybriddeid.pipeline.operating_point import NO_THRESHOLD, check_threshold, shown_probability

if TYPE_CHECKING:
    from hybriddeid.pipeline.core import Pipeline

# Dense near 1.0, where P(O) thresholds start to matter for a well-trained CRF.
DEFAULT_THRESHOLDS = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999)
SWEEP_CRITERIA = ("binary_token", "strict")  # binary token: PHI or not, labels ignored; strict: micro
# A recall target this high (every target that prints as 1 among them) asks the model to miss next to
# nothing: the threshold that reaches it on a sweep's few notes tends to flag ordinary clinical words.
RECALL_TARGET_CEILING = 0.9995
# A chosen point keeping less than this share of the precision without a threshold costs too much to pass
# in silence: most of what it adds is clinical text.
PRECISION_KEPT_FLOOR = 0.5

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepPoint:
    """Scores of the pipeline at one threshold (None: no threshold, the configured output)."""

    threshold: float | None
    binary_token: PRF
    strict: PRF
    pred_spans: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "binary_token": self.binary_token.to_dict(),
            "strict": self.strict.to_dict(),
            "pred_spans": self.pred_spans,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepPoint:
        threshold = data["threshold"]
        return cls(
            None if threshold is None else check_threshold(threshold),
            PRF(**data["binary_token"]),
            PRF(**data["strict"]),
            int(data["pred_spans"]),
        )


def _label(threshold: float | None) -> str:
    return "unset" if threshold is None else shown_probability(threshold)


@dataclass(frozen=True)
class Sweep:
    """The points of a sweep, what they were measured on, and how long it took."""

    points: tuple[SweepPoint, ...]
    model: str
    model_trained_at: str
    documents: int
    gold_spans: int
    read_seconds: float = 0.0  # running the pipeline over the notes, once
    apply_seconds: float = 0.0  # applying and scoring every threshold
    phi_set: str = DEFAULT_PHI_SET  # the PHI set predictions and scores were taken under

    def choose(self, recall_target: float) -> SweepPoint | None:
        """The point with the best binary token precision among those whose binary token recall
        reaches ``recall_target`` (ties: higher recall, then the lower threshold, no threshold
        first); None when no point does."""
        recall_target = check_threshold(recall_target, "recall target")
        reaching = [point for point in self.points if point.binary_token.recall >= recall_target]
        if not reaching:
            return None
        return min(
            reaching,
            key=lambda p: (
                -p.binary_token.precision,
                -p.binary_token.recall,
                -1.0 if p.threshold is None else p.threshold,
            ),
        )

    @property
    def unset_point(self) -> SweepPoint | None:
        """The point without a threshold: the model's output as its score floors and merger give it."""
        return next((point for point in self.points if point.threshold is None), None)

    def caution(self, recall_target: float, point: SweepPoint) -> str | None:
        """What choosing ``point`` for ``recall_target`` costs, in the sweep's numbers, when that is too
        much to pass in silence; None otherwise. Too much: a threshold chosen for a target at or above
        ``RECALL_TARGET_CEILING`` (one that prints as 1 among them), or binary token precision below
        ``PRECISION_KEPT_FLOOR`` times the precision without a threshold. The point without a threshold
        costs nothing: no caution."""
        if point.threshold is None:
            return None
        unset = self.unset_point
        precision = point.binary_token.precision
        base = unset.binary_token.precision if unset is not None else None
        reasons = []
        if recall_target >= RECALL_TARGET_CEILING:
            reasons.append(f"recall target {shown_probability(recall_target)} asks the model to miss next to no PHI")
        if base and precision < PRECISION_KEPT_FLOOR * base:
            reasons.append(
                f"threshold {_label(point.threshold)} keeps less than {PRECISION_KEPT_FLOOR:.0%} of the "
                "model's precision"
            )
        if not reasons:
            return None
        against = f" against {base:.4f} without a threshold" if base is not None else ""
        return (
            f"{' and '.join(reasons)}: on the sweep's {self.documents} notes threshold {_label(point.threshold)} "
            f"gives binary token precision {precision:.4f}{against}, so about {1.0 - precision:.0%} of the tokens "
            "it flags are not PHI and their clinical text will be replaced; choose a lower recall target if "
            "that is too much"
        )

    def pick(self, recall_target: float) -> SweepPoint | None:
        """``choose``, with its ``caution`` logged as a warning: what every command that turns a recall
        target into a threshold calls."""
        point = self.choose(recall_target)
        if point is not None:
            caution = self.caution(recall_target, point)
            if caution is not None:
                log.warning("%s", caution)
        return point

    def threshold_for(self, recall_target: float) -> float:
        """``pick``'s threshold as ``Pipeline.predict`` takes it (``NO_THRESHOLD``, 0: the point
        without one), or a ValueError when no point reaches the target."""
        point = self.pick(recall_target)
        if point is None:
            best = max(self.points, key=lambda p: p.binary_token.recall)
            raise ValueError(
                f"no threshold in the sweep reaches binary token recall "
                f"{shown_probability(recall_target)} (the highest is "
                f"{best.binary_token.recall:.4f}, at threshold {_label(best.threshold)}); sweep higher "
                "thresholds (evaluate --sweep --thresholds) or lower the target"
            )
        return NO_THRESHOLD if point.threshold is None else point.threshold

    def check_model(self, pipeline: Pipeline, name: str) -> None:
        """A ValueError when ``pipeline`` (loaded as ``name``) is not the model the sweep measured:
        another model's thresholds would not give the recall the sweep promises."""
        trained_at = str(pipeline.meta.get("trained_at", ""))
        if self.model_trained_at and trained_at and trained_at != self.model_trained_at:
            raise ValueError(
                f"the sweep was made with model {self.model!r} (trained {self.model_trained_at}), not "
                f"with {name!r} (trained {trained_at}); run evaluate --sweep with this model"
            )

    # -- output -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_trained_at": self.model_trained_at,
            "documents": self.documents,
            "gold_spans": self.gold_spans,
            "phi_set": self.phi_set,
            "seconds": {"read": round(self.read_seconds, 2), "apply": round(self.apply_seconds, 2)},
            "points": [point.to_dict() for point in self.points],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sweep:
        seconds = data.get("seconds", {})
        return cls(
            tuple(SweepPoint.from_dict(point) for point in data["points"]),
            str(data.get("model", "")),
            str(data.get("model_trained_at", "")),
            int(data["documents"]),
            int(data["gold_spans"]),
            float(seconds.get("read", 0.0)),
            float(seconds.get("apply", 0.0)),
            str(data.get("phi_set", DEFAULT_PHI_SET)),
        )

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Sweep:
        """A sweep written by ``save`` (``evaluate --sweep --sweep-out``); ValueError if it is not one."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except OSError as exc:
            raise ValueError(f"{path}: cannot read the sweep file ({exc.strerror or type(exc).__name__})") from None
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(f"{path}: not a sweep file (write one with evaluate --sweep --sweep-out)") from None

    def format_table(self) -> str:
        """The precision/recall curve as a fixed-width table, one row per threshold."""
        lines = [
            f"P(O) threshold sweep: model {self.model}, PHI set {self.phi_set}, {self.documents} documents, "
            f"{self.gold_spans} gold spans",
            f"{'threshold':<11}{'binary token':^23}  {'strict micro':^23}  {'spans':>6}",
            f"{'':<11}{'P':>7}{'R':>8}{'F1':>8}  {'P':>7}{'R':>8}{'F1':>8}  {'':>6}",
        ]
        for point in self.points:
            b, s = point.binary_token, point.strict
            lines.append(
                f"{_label(point.threshold):<11}{b.precision:7.4f} {b.recall:7.4f} {b.f1:7.4f}  "
                f"{s.precision:7.4f} {s.recall:7.4f} {s.f1:7.4f}  {point.pred_spans:>6}"
            )
        return "\n".join(lines)

    def plot(self, path: Path, chosen: SweepPoint | None = None) -> None:
        """Write the binary token precision/recall curve as a PNG (needs matplotlib: the ``plot`` extra)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("--plot needs matplotlib: pip install 'hybriddeid[plot]'") from None
        figure, axes = plt.subplots(figsize=(6.4, 4.8))
        curve = [point for point in self.points if point.threshold is not None]
        axes.plot(
            [p.binary_token.recall for p in curve], [p.binary_token.precision for p in curve], "o-", label="threshold"
        )
        for point in curve:
            axes.annotate(
                _label(point.threshold),
                (point.binary_token.recall, point.binary_token.precision),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
        for point in self.points:
            if point.threshold is None:
                axes.plot(point.binary_token.recall, point.binary_token.precision, "s", color="black", label="unset")
        if chosen is not None:
            axes.plot(
                chosen.binary_token.recall,
                chosen.binary_token.precision,
                "*",
                markersize=14,
                color="red",
                label=f"chosen ({_label(chosen.threshold)})",
            )
        axes.set_xlabel("binary token recall")
        axes.set_ylabel("binary token precision")
        axes.set_title(f"P(O) threshold sweep: {self.model}, {self.documents} notes")
        axes.grid(True, alpha=0.3)
        axes.legend(loc="lower left")
        figure.tight_layout()
        figure.savefig(Path(path), format="png", dpi=120)
        plt.close(figure)


def parse_thresholds(text: str) -> tuple[float, ...]:
    """A comma-separated grid ("0.5,0.9,0.99") as sorted distinct thresholds."""
    try:
        values = [float(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise ValueError(f"thresholds must be comma-separated numbers in (0, 1], not {text!r}") from None
    if not values:
        raise ValueError("give at least one threshold")
    return tuple(sorted({check_threshold(value, "each threshold") for value in values}))


def run_sweep(
    pipeline: Pipeline,
    gold: Iterable[Document],
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    model: str = "",
    progress: bool = False,
    phi_set: str | None = None,
) -> Sweep:
    """Run ``pipeline`` over the gold notes once and score it without a threshold and at each of
    ``thresholds`` (binary token and strict micro), as ``evaluate`` scores it under ``phi_set``
    (default: the pipeline's own; the predictions are that set's, as ``predict`` gives them)."""
    from tqdm import tqdm

    gold = list(gold)
    phi_set = phi_set or pipeline.phi_set
    grid = sorted({check_threshold(value) for value in thresholds})
    started = time.perf_counter()
    readings = [pipeline.read(doc, grid[-1]) for doc in tqdm(gold, desc="reading", unit="note", disable=not progress)]
    read_seconds = time.perf_counter() - started
    started = time.perf_counter()
    points = []
    for threshold in [None, *grid]:
        pred = [
            doc.with_spans(pipeline.within_phi_set(doc, reading.spans(threshold), phi_set))
            for doc, reading in zip(gold, readings)
        ]
        report = evaluate(gold, pred, phi_set=phi_set)
        scores = {criterion: report.score(criterion) for criterion in SWEEP_CRITERIA}
        points.append(
            SweepPoint(threshold, scores["binary_token"], scores["strict"], sum(len(doc.spans) for doc in pred))
        )
    return Sweep(
        tuple(points),
        model,
        str(pipeline.meta.get("trained_at", "")),
        len(gold),
        sum(len(doc.spans) for doc in gold),
        read_seconds,
        time.perf_counter() - started,
        phi_set,
    )
