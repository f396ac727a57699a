"""Residual risk: how much PHI a model likely left in notes, estimated without gold.

Every token the output leaves untagged still has the token CRF's marginal P(PHI) = 1 - P(O)
(``processing`` keeps them: ``NoteSettings(chances=True)``). Their sum is the expected number of
PHI tokens missed, if those probabilities are right. They are not: a CRF's marginals are over-
or under-confident, so the sum is **calibrated** on reviewed notes, where a reviewer's spans tell
which untagged tokens were PHI after all: isotonic regression (pool-adjacent-violators) or Platt
scaling (a logistic curve on the logit) maps P(PHI) to the share of such tokens that were PHI.
Neither is best everywhere: with few missed tokens among the reviewed ones, isotonic steps start at
the few PHI tokens seen and overstate the rate beyond them, while Platt's curve spreads mass over the
many tokens of very low P(PHI) when the true rate there is near nothing. ``auto`` (the default) fits
each on four fifths of the reviewed notes, predicts the missed tokens of the other fifth, and keeps
the one whose predicted counts came closer (``choose_calibration``).

The estimate comes with an interval that holds two uncertainties: which tokens happen to be PHI
given their probabilities (a Poisson-binomial count, normal approximation) and how well the
reviewed notes pin the calibration down (the calibrator refitted on notes drawn with replacement
from the reviewed ones). Without reviewed notes only the first is in it, and the estimate is the
raw marginals' sum.

Too little review to calibrate (fewer than ``MIN_REVIEWED_NOTES`` reviewed notes or ``MIN_REVIEWED_MISSES``
missed tokens among them, or a degenerate Platt fit), the estimate falls back to the raw sum and says why
(``RiskEstimate.uncalibrated_because``): a calibrator fitted on a note or two is all zeros or a step, and
its bootstrap interval has no width. Whatever the amount of review, the interval also holds the **ratio
interval** (``ratio_interval``): misses are taken to be proportional to the raw P(PHI) mass (one rate, the
reviewed notes' misses over their mass), the rate's uncertainty a Gamma posterior from the reviewed count
(Jeffreys prior) and the estimated notes' count Poisson given it, so that the count has a negative-binomial
predictive distribution; the variance is widened by the reviewed notes' overdispersion (misses cluster in
notes: a cluster-robust variance of the ratio against the Poisson one) and the lower bound is also taken
without the reviewed note holding the most misses. Falling back, the interval reaches up to the raw sum
too. ``benchmarks/risk.py --reviewed 1,2,...`` measures how often the interval holds the truth.

Per type: a token's expected missed PHI is shared among labels as its label probabilities say.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hybriddeid.core.document import Span

CALIBRATIONS = ("isotonic", "platt")
AUTO = "auto"  # the calibration whose cross-fitted counts on the reviewed notes come closer
CROSS_FOLDS = 5
BOOTSTRAP_ROUNDS = 200
INTERVAL = 0.95
_EPS = 1e-6
# Below these the estimate is not calibrated (see the module docstring; benchmarks/risk.py measured them).
MIN_REVIEWED_NOTES = 20
MIN_REVIEWED_MISSES = 5
PLATT_MAX_SLOPE = 20.0  # a Platt slope beyond this (or a fit that did not converge) is a degenerate step


@dataclass(frozen=True, slots=True)
class TokenChance:
    """One token the token CRF read: offsets, P(PHI) (1 - its marginal P(O)) and, when the CRF
    has several labels, each non-O label's probability."""

    start: int
    end: int
    p_phi: float
    labels: Mapping[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str | None:
        """The most probable PHI label (None for a one-label CRF)."""
        return max(sorted(self.labels), key=self.labels.__getitem__) if self.labels else None


def _covered(chances: Sequence[TokenChance], spans: Sequence[Span]) -> list[bool]:
    """For each token (sorted by start), whether any of ``spans`` overlaps it."""
    bounds = sorted((span.start, span.end) for span in spans)
    out, at = [], 0
    for chance in chances:
        while at < len(bounds) and bounds[at][1] <= chance.start:
            at += 1
        hit = False
        for start, end in bounds[at:]:
            if start >= chance.end:
                break
            if end > chance.start:
                hit = True
                break
        out.append(hit)
    return out


def untagged(chances: Sequence[TokenChance], spans: Sequence[Span]) -> list[TokenChance]:
    """The tokens no span of the output touches: where missed PHI would be."""
    chances = sorted(chances, key=lambda chance: chance.start)
    return [chance for chance, hit in zip(chances, _covered(chances, spans)) if not hit]


def outcomes(
    chances: Sequence[TokenChance], output: Sequence[Span], reviewed: Sequence[Span]
) -> tuple[np.ndarray, np.ndarray]:
    """P(PHI) of the tokens ``output`` leaves untagged and whether each was PHI after all (a span
    of ``reviewed``, a reviewer's or gold, touches it): what calibration fits, and, summed, the
    true number of missed PHI tokens."""
    left = untagged(chances, output)
    return (np.array([chance.p_phi for chance in left], dtype=float), np.array(_covered(left, reviewed), dtype=float))


class Calibrator:
    """A monotone map from raw P(PHI) to the observed share of PHI (``fit``); identity unfitted."""

    def __init__(self, method: str = "isotonic") -> None:
        if method not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}, not {method!r}")
        self.method = method
        self.fitted = False
        self._knots: tuple[np.ndarray, np.ndarray] | None = None
        self._platt: tuple[float, float] = (1.0, 0.0)
        self._converged = True

    def fit(self, p: np.ndarray, y: np.ndarray) -> Calibrator:
        """Fit on raw probabilities ``p`` and outcomes ``y`` (0/1). Too few points (or no PHI among
        them) still fit: isotonic gives zeros, Platt a steep curve; the interval says how unsure."""
        p, y = np.asarray(p, float), np.asarray(y, float)
        if len(p) == 0:
            return self
        if self.method == "isotonic":
            self._knots = _isotonic(p, y)
        else:
            a, b, self._converged = _platt(p, y)
            self._platt = (a, b)
        self.fitted = True
        return self

    def degenerate(self) -> str | None:
        """Why the fit is no calibration but a step (a Platt slope beyond ``PLATT_MAX_SLOPE`` or a fit that
        did not converge: the reviewed tokens separate perfectly, as with a note or two), else None."""
        if not self.fitted or self.method != "platt":
            return None
        a = self._platt[0]
        if not self._converged or not math.isfinite(a) or abs(a) > PLATT_MAX_SLOPE:
            return (
                f"the Platt fit is degenerate (slope {a:.3g}{'' if self._converged else ', not converged'}): "
                "the reviewed tokens' P(PHI) separate the misses from the rest perfectly"
            )
        return None

    def __call__(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, float)
        if not self.fitted:
            return p
        if self.method == "isotonic":
            assert self._knots is not None  # fitted
            xs, ys = self._knots
            return np.interp(p, xs, ys)
        a, b = self._platt
        return _sigmoid(a * _logit(p) + b)

    def to_dict(self) -> dict[str, Any]:
        if not self.fitted:
            return {"method": "none"}
        if self.method == "isotonic":
            assert self._knots is not None  # fitted
            return {"method": "isotonic", "x": self._knots[0].tolist(), "y": self._knots[1].tolist()}
        return {"method": "platt", "a": self._platt[0], "b": self._platt[1]}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -500, 500)))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, _EPS, 1 - _EPS)
    return np.log(p / (1 - p))


def _logit_binned(p: np.ndarray, bins: int, *values: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The tokens of P(PHI) ``p`` in ``bins`` narrow bins of logit(p) (width 28/``bins``): the count of
    each non-empty bin and the sum of each of ``values`` over it."""
    which = np.clip(((_logit(p) + 14) / 28 * bins).astype(int), 0, bins - 1)
    counts = np.bincount(which, minlength=bins).astype(float)
    used = counts > 0
    return counts[used], [np.bincount(which, value, bins)[used] for value in values]


def logit_bins(p: np.ndarray, bins: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """``p`` as the token counts and mean P(PHI) of its non-empty narrow bins of logit(p) (under 0.4% of
    p wide): the bootstrap rounds evaluate each refitted calibrator on these instead of every token, so
    that a review page's save over 1,000 notes does not wait seconds; a smooth or piecewise-linear
    calibrator's sums move far less than the rounds' own noise."""
    counts, (sums,) = _logit_binned(p, bins, p)
    return counts, sums / counts


def _isotonic(p: np.ndarray, y: np.ndarray, bins: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Pool-adjacent-violators over ``bins`` narrow bins of logit(p) (so that a fit over 100,000
    tokens, refitted for every bootstrap round, stays fast): the non-decreasing step function
    nearest ``y``, as knots (block mean of p, block mean of y) for linear interpolation."""
    counts, (sums_p, sums_y) = _logit_binned(p, bins, p, y)
    weights, sums_x, means = list(counts), list(sums_p), list(sums_y / counts)
    blocks_w: list[float] = []
    blocks_x: list[float] = []
    blocks_y: list[float] = []
    for w, sx, m in zip(weights, sums_x, means):
        blocks_w.append(w)
        blocks_x.append(sx)
        blocks_y.append(m)
        while len(blocks_y) > 1 and blocks_y[-2] > blocks_y[-1]:
            total = blocks_w[-2] + blocks_w[-1]
            blocks_y[-2] = (blocks_y[-2] * blocks_w[-2] + blocks_y[-1] * blocks_w[-1]) / total
            blocks_x[-2] += blocks_x[-1]
            blocks_w[-2] = total
            del blocks_w[-1], blocks_x[-1], blocks_y[-1]
    knots_x = np.array([sx / w for sx, w in zip(blocks_x, blocks_w)])
    return np.concatenate(([0.0], knots_x, [1.0])), np.concatenate(([0.0], blocks_y, [blocks_y[-1]]))


def _platt(p: np.ndarray, y: np.ndarray, iterations: int = 50) -> tuple[float, float, bool]:
    """Logistic regression of ``y`` on logit(p) by Newton's method, with Platt's target smoothing
    (so that all-0 or all-1 outcomes give a finite curve): slope, intercept, and whether it converged."""
    positives = y.sum()
    negatives = len(y) - positives
    target = np.where(y > 0, (positives + 1) / (positives + 2), 1 / (negatives + 2))
    x = _logit(p)
    a, b = 1.0, 0.0
    for _ in range(iterations):
        q = _sigmoid(a * x + b)
        grad = np.array([np.sum((q - target) * x), np.sum(q - target)])
        w = q * (1 - q) + 1e-12
        hessian = np.array([[np.sum(w * x * x), np.sum(w * x)], [np.sum(w * x), np.sum(w)]]) + 1e-9 * np.eye(2)
        step = np.linalg.solve(hessian, grad)
        a, b = a - step[0], b - step[1]
        if np.abs(step).max() < 1e-9:
            return float(a), float(b), True
    return float(a), float(b), False


@dataclass
class NoteRisk:
    """One note's share of the estimate."""

    name: str
    tokens: int
    expected_missed: float
    per_type: dict[str, float]

    @property
    def per_1000(self) -> float:
        return 1000 * self.expected_missed / self.tokens if self.tokens else 0.0


@dataclass
class RiskEstimate:
    """Expected missed PHI tokens in a set of notes, with a ``INTERVAL`` interval."""

    tokens: int
    expected_missed: float
    low: float
    high: float
    per_type: dict[str, float]
    notes: list[NoteRisk]
    calibration: dict[str, Any]
    reviewed_notes: int
    reviewed_tokens: int
    uncalibrated_because: str | None = None  # why the estimate is the raw sum (too little review, a degenerate fit)

    def per_1000(self, value: float | None = None) -> float:
        """``value`` (default: the estimate) per 1,000 tokens."""
        value = self.expected_missed if value is None else value
        return 1000 * value / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "expected_missed": self.expected_missed,
            "interval": [self.low, self.high],
            "interval_level": INTERVAL,
            "per_1000": self.per_1000(),
            "per_1000_interval": [self.per_1000(self.low), self.per_1000(self.high)],
            "per_type": dict(sorted(self.per_type.items(), key=lambda item: -item[1])),
            "calibration": self.calibration,
            "reviewed_notes": self.reviewed_notes,
            "reviewed_tokens": self.reviewed_tokens,
            "uncalibrated_because": self.uncalibrated_because,
            "notes": [
                {
                    "name": note.name,
                    "tokens": note.tokens,
                    "expected_missed": note.expected_missed,
                    "per_1000": note.per_1000,
                }
                for note in self.notes
            ],
        }


@dataclass
class Reviewed:
    """The reviewed notes' untagged tokens: raw P(PHI), outcomes, and which note each came from."""

    p: np.ndarray
    y: np.ndarray
    note: np.ndarray
    notes: int

    @classmethod
    def collect(cls, items: Sequence[tuple[Sequence[TokenChance], Sequence[Span], Sequence[Span]]]) -> Reviewed:
        """From (chances, model output, reviewed spans) per note."""
        ps, ys, ids = [], [], []
        for index, (chances, output, reviewed) in enumerate(items):
            p, y = outcomes(chances, output, reviewed)
            ps.append(p)
            ys.append(y)
            ids.append(np.full(len(p), index))

        def cat(parts: list[np.ndarray], kind: type) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, kind)

        return cls(cat(ps, float), cat(ys, float), cat(ids, int), len(items))


def choose_calibration(reviewed: Reviewed, folds: int = CROSS_FOLDS) -> tuple[str, dict[str, float]]:
    """The calibration for ``reviewed``: each method fitted on the notes outside one of ``folds`` groups
    (note by note in turn) predicts the missed tokens of that group; the method with the smaller sum of
    squared count errors wins (isotonic on a tie, with fewer than two notes, or with no missed token to
    count). Returns the method and each method's error."""
    groups = min(folds, reviewed.notes)
    if groups < 2 or not reviewed.y.any():
        return "isotonic", {}
    group = reviewed.note % groups
    errors = {}
    for method in CALIBRATIONS:
        error = 0.0
        for index in range(groups):
            held = group == index
            predicted = Calibrator(method).fit(reviewed.p[~held], reviewed.y[~held])(reviewed.p[held]).sum()
            error += float(predicted - reviewed.y[held].sum()) ** 2
        errors[method] = error
    return min(CALIBRATIONS, key=lambda method: (errors[method], CALIBRATIONS.index(method))), errors


def resolve_calibration(method: str, reviewed: Reviewed | None) -> tuple[str, dict[str, float]]:
    """``method`` itself (``Calibrator`` checks the name), or for ``auto`` the one ``choose_calibration``
    picks (isotonic without reviewed notes)."""
    if method != AUTO:
        return method, {}
    return choose_calibration(reviewed) if reviewed is not None and len(reviewed.p) else ("isotonic", {})


def _negative_binomial_interval(shape: float, p: float, level: float = INTERVAL) -> tuple[int, int]:
    """The central ``level`` interval of a negative binomial count (``shape`` > 0, success chance ``p``):
    P(k) = Gamma(k + shape) / (Gamma(shape) k!) p^shape (1 - p)^k, summed from 0."""
    low_q, high_q = (1 - level) / 2, (1 + level) / 2
    log_pk, cdf, k, low = shape * math.log(p), 0.0, 0, None
    log_q = math.log1p(-p)
    while True:
        cdf += math.exp(log_pk)
        if low is None and cdf >= low_q:
            low = k
        if cdf >= high_q or k > 10_000_000:
            return low if low is not None else k, k
        log_pk += math.log((k + shape) / (k + 1)) + log_q
        k += 1


def _ratio_bounds(
    misses: np.ndarray, mass: np.ndarray, target: float, target_notes: int, level: float
) -> tuple[float, float]:
    """The ratio interval of ``ratio_interval`` from per-note missed counts and raw masses."""
    m, r = float(misses.sum()), float(mass.sum())
    if r <= 0 or target <= 0:
        return 0.0, (math.inf if target > 0 else 0.0)
    k = len(misses)
    phi = 1.0
    if m > 0 and k > 1:  # overdispersion: the cluster-robust variance of the predicted count over the Poisson one
        rate = m / r
        residual = float(((misses - rate * mass) ** 2).sum()) / (k - 1)
        robust = k * residual * (target / r) ** 2 + target_notes * residual
        phi = max(1.0, robust / (rate * target * (target / r + 1)))
    low, high = _negative_binomial_interval((m + 0.5) / phi, r / (r + target), level)
    return (low * phi if m > 0 else 0.0), high * phi  # no miss seen: nothing bounds the count away from 0


def ratio_interval(
    reviewed: Reviewed, target_mass: float, target_notes: int, level: float = INTERVAL
) -> tuple[float, float]:
    """A ``level`` interval for the missed PHI tokens of notes whose untagged tokens' raw P(PHI) sum to
    ``target_mass`` (``target_notes`` notes), from the reviewed notes' misses over their raw mass: a
    negative-binomial predictive interval (Gamma posterior of the rate, Jeffreys prior), widened by the
    reviewed notes' overdispersion; its lower bound is also taken without the reviewed note that holds
    the most misses (misses cluster in notes; with that note alone, the lower bound is 0); with no miss
    seen, it is 0. No reviewed mass: (0, inf)."""
    misses = np.bincount(reviewed.note, reviewed.y, reviewed.notes) if reviewed.notes else np.zeros(0)
    mass = np.bincount(reviewed.note, reviewed.p, reviewed.notes) if reviewed.notes else np.zeros(0)
    low, high = _ratio_bounds(misses, mass, target_mass, target_notes, level)
    if len(misses) and misses.max() > 0:  # a single reviewed note with misses leaves no lower bound but 0
        keep = np.arange(len(misses)) != int(np.argmax(misses))
        low = min(low, _ratio_bounds(misses[keep], mass[keep], target_mass, target_notes, level)[0])
    return low, high


def uncalibrated_because(reviewed: Reviewed | None) -> str | None:
    """Why ``reviewed`` is too little to calibrate on (``MIN_REVIEWED_NOTES``, ``MIN_REVIEWED_MISSES``), or None."""
    if reviewed is None or not len(reviewed.p):
        return "no reviewed notes: the raw marginals' sum, whose interval counts token chance only"
    misses = int(reviewed.y.sum())
    if reviewed.notes < MIN_REVIEWED_NOTES or misses < MIN_REVIEWED_MISSES:
        return (
            f"{reviewed.notes} reviewed notes with {misses} missed tokens among them: calibration needs at least "
            f"{MIN_REVIEWED_NOTES} notes and {MIN_REVIEWED_MISSES} misses, so the estimate is the raw marginals' "
            "sum and the interval is wide"
        )
    return None


def estimate(
    notes: Sequence[tuple[str, int, Sequence[TokenChance]]],
    reviewed: Reviewed | None = None,
    method: str = AUTO,
    rounds: int = BOOTSTRAP_ROUNDS,
    seed: int = 0,
) -> RiskEstimate:
    """The residual-risk estimate of ``notes`` (name, token count, untagged tokens' chances), calibrated on
    ``reviewed`` when it is enough (else the raw sum, saying why; see the module docstring)."""
    raw = [np.array([chance.p_phi for chance in chances], float) for _, _, chances in notes]
    flat = np.concatenate(raw) if raw else np.zeros(0)
    why = uncalibrated_because(reviewed)
    chosen_from: dict[str, float]
    if why is not None and method == AUTO:
        method, chosen_from = "isotonic", {}  # nothing to choose between: neither is fitted
    else:
        method, chosen_from = resolve_calibration(method, reviewed)
    calibrator = Calibrator(method)
    if why is None and reviewed is not None:  # why is None only with reviewed notes
        calibrator.fit(reviewed.p, reviewed.y)
        degenerate = calibrator.degenerate()
        if degenerate is not None:
            why = f"{degenerate}; the estimate is the raw marginals' sum and the interval is wide"
            calibrator = Calibrator(method)  # unfitted: the identity
    calibrated = calibrator(flat)
    total = float(calibrated.sum())
    rng = np.random.default_rng(seed)
    if calibrator.fitted and reviewed is not None:  # enough reviewed notes for a bootstrap over them
        draws = []
        by_note = [np.flatnonzero(reviewed.note == i) for i in range(reviewed.notes)]
        counts, centres = logit_bins(flat)
        for _ in range(rounds):
            mask = np.concatenate([by_note[i] for i in rng.integers(0, reviewed.notes, reviewed.notes)])
            refit = Calibrator(method).fit(reviewed.p[mask], reviewed.y[mask])
            q = refit(centres)
            draws.append(rng.normal((counts * q).sum(), math.sqrt(max((counts * q * (1 - q)).sum(), 0.0))))
        low, high = (float(x) for x in np.quantile(draws, [(1 - INTERVAL) / 2, (1 + INTERVAL) / 2]))
    else:  # token chance alone around the raw sum
        spread = 1.959963984540054 * math.sqrt(float((flat * (1 - flat)).sum()))
        low, high = total - spread, total + spread
    if reviewed is not None and len(reviewed.p):  # the ratio interval, whatever the calibration
        ratio_low, ratio_high = ratio_interval(reviewed, float(flat.sum()), len(notes))
        low, high = min(low, ratio_low), max(high, ratio_high if math.isfinite(ratio_high) else high)
    high = min(high, float(len(flat)))  # no more misses than untagged tokens
    per_type: dict[str, float] = {}
    note_risks, at = [], 0
    for (name, tokens, chances), p in zip(notes, raw):
        q = calibrated[at : at + len(p)]
        at += len(p)
        own: dict[str, float] = {}
        for chance, value in zip(chances, q):
            weight = sum(chance.labels.values())
            for label, probability in chance.labels.items():
                if weight > 0:
                    own[label] = own.get(label, 0.0) + value * probability / weight
        for label, value in own.items():
            per_type[label] = per_type.get(label, 0.0) + value
        note_risks.append(NoteRisk(name, tokens, float(q.sum()), own))
    calibration = calibrator.to_dict()
    if chosen_from:
        calibration["cross_fitted_count_errors"] = chosen_from  # what ``auto`` chose by
    return RiskEstimate(
        sum(tokens for _, tokens, _ in notes),
        total,
        max(low, 0.0),
        max(high, 0.0),
        per_type,
        note_risks,
        calibration,
        reviewed.notes if reviewed is not None else 0,
        int(len(reviewed.p)) if reviewed is not None else 0,
        why,
    )


def reliability(p: np.ndarray, y: np.ndarray, bins: int = 10) -> list[dict[str, float]]:
    """Bins of predicted P(PHI) on a log-spaced grid (most untagged tokens are near 0): each
    bin's mean prediction, observed share of PHI and token count."""
    p, y = np.asarray(p, float), np.asarray(y, float)
    edges = np.concatenate(([0.0], np.logspace(-4, 0, bins)))
    out = []
    for low, high in zip(edges[:-1], edges[1:]):
        mask = (p >= low) & ((p < high) | (high == 1.0))
        if mask.any():
            out.append(
                {
                    "low": float(low),
                    "high": float(high),
                    "predicted": float(p[mask].mean()),
                    "observed": float(y[mask].mean()),
                    "tokens": int(mask.sum()),
                }
            )
    return out


def plot_reliability(reviewed: Reviewed, calibrator_method: str, path: Path) -> Path:
    """Draw the reliability diagram of ``reviewed`` (raw and, cross-fitted by halves of the notes,
    calibrated P(PHI) against the observed share of PHI) into the PNG ``path`` (needs matplotlib:
    ``pip install 'hybriddeid[plot]'``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    calibrator_method = resolve_calibration(calibrator_method, reviewed)[0]
    calibrated = cross_calibrated(reviewed, calibrator_method)
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([1e-4, 1], [1e-4, 1], color="grey", linestyle=":", label="perfect")
    for values, name, marker in (
        (reviewed.p, "raw P(PHI)", "o"),
        (calibrated, f"{calibrator_method} (cross-fitted)", "s"),
    ):
        bins = reliability(values, reviewed.y)
        ax.plot([b["predicted"] for b in bins], [max(b["observed"], 1e-4) for b in bins], marker=marker, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1e-4, 1), ax.set_ylim(1e-4, 1)
    ax.set_xlabel("predicted P(PHI) of untagged tokens")
    ax.set_ylabel("observed share that was PHI")
    ax.set_title(f"Reliability: {reviewed.notes} reviewed notes, {len(reviewed.p)} untagged tokens", fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cross_calibrated(reviewed: Reviewed, method: str) -> np.ndarray:
    """Calibrated P(PHI) of the reviewed tokens, each half of the notes calibrated on the other
    (a calibrator judged on its own training points always looks perfect)."""
    half = reviewed.note % 2 == 0
    out = reviewed.p.copy()
    for part in (half, ~half):
        if part.any() and (~part).any():
            out[part] = Calibrator(method).fit(reviewed.p[~part], reviewed.y[~part])(reviewed.p[part])
    return out
