"""The service's model is kept out of the cycle collector's scans once warmed up (``service.work.warm_up``):
a full collection in a worker walked the whole model, a pause of ~100 ms once every ~150 requests."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest

pytest.importorskip("pydantic", reason="the service's request models need pydantic (the [service] extra)")

from hybriddeid.runs.processing import load_model  # noqa: E402
from hybriddeid.service.work import warm_up  # noqa: E402


def _best_of_three(collect: Callable[[], int]) -> float:
    """The shortest of three full collections (seconds): a shared machine's pauses lengthen some."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        collect()
        times.append(time.perf_counter() - started)
    return min(times)


def test_warm_up_freezes_the_model_so_a_full_collection_skips_it() -> None:
    pipeline = load_model("en")
    assert gc.get_freeze_count() == 0  # nothing frozen before (the test's own process)
    try:
        unfrozen = _best_of_three(gc.collect)
        rules = pipeline.components["rule"].enabled_rules
        assert not all("_regex" in rule.__dict__ for rule in rules)  # the bundled rules compile when needed...
        warm_up(pipeline)
        assert all("_regex" in rule.__dict__ for rule in rules)  # ...and before the workers fork, in a server
        assert gc.get_freeze_count() > 10_000  # the model's objects, not a handful
        frozen = _best_of_three(gc.collect)
        assert frozen < unfrozen  # the collector no longer walks the model
    finally:
        gc.unfreeze()
    assert pipeline.components  # kept alive through the timings above
