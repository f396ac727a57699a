"""``NeuralTagger``: a neural architecture behind the project's classifier protocol.

``fit(docs)`` holds out ``dev_fraction`` of the notes and stops early on their strict F1 (the
project's evaluator); ``predict(note)`` returns character-offset spans scored by the least
confident token's tag probability; ``to_disk`` writes ``vocabularies.json`` (words hashed) and
``model.pt`` (a state dict, loaded with ``weights_only=True``), never a pickled object; its
parameters are the pipeline config's ``[neural]`` section.

Devices and processes: ``from_disk`` chooses the device (the loader's choice, else the config's,
which falls back to the CPU on a machine without that CUDA device) but leaves the weights on the
CPU and never runs a parallel torch operation, so that batch runs can fork workers from the
process that loaded it: the model moves to its device, and torch's threads are set, in the
process that tags (``_ready``). Neither OpenMP's thread pool nor CUDA survives a fork, so the
loading process starts neither, CUDA is counted through NVML only, and a process forked after its
parent ran torch on several threads tags on one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import random
import resource
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybriddeid.backends.neural.encoding import UNK_ID, PreparedNote, Vocabularies, note_tokens, prepare_note
from hybriddeid.backends.neural.feeding import fed_predictions
from hybriddeid.backends.neural.models import Batch, NoteTensors, TaggerModel, build_model
from hybriddeid.backends.neural.settings import CUDA_PREDICT_TOKENS, NeuralSettings, check_device
from hybriddeid.classifiers.base import ComponentError, NotFittedError
from hybriddeid.classifiers.crf import CLUSTERS_DIR
from hybriddeid.classifiers.schemes import OUTSIDE, decode_tags, encode_tags
from hybriddeid.core.document import Document, Span
from hybriddeid.evaluation import evaluate
from hybriddeid.features.analysis import AnalysedNote, analyse
from hybriddeid.features.resources import ClusterFeatures
from hybriddeid.knowledge.clusters import WordClusters

log = logging.getLogger(__name__)

VOCABULARIES_FILE = "vocabularies.json"
WEIGHTS_FILE = "model.pt"
# Fed tagging (predict_many with workers) gathers this many tagging batches of prepared notes before
# sorting them by length into batches (less padding than batches in arrival order).
FEED_WINDOW_BATCHES = 4
PREDICT_WINDOW_TOKENS = 65_536  # the window's tokens when batches count notes (the CPU)
TRAINING_FILE = "training.json"  # fit seconds and per-epoch loss, held-out F1, seconds (no text)


class DeviceError(ComponentError):
    """The device asked for cannot be used here (no such CUDA device, CUDA started before a fork)."""


def cuda_devices() -> int:
    """CUDA devices on this machine, counted without starting CUDA (NVML), so processes forked
    afterwards can still use it; 0 with a CPU-only torch."""
    return torch.cuda.device_count()


def resolve_device(name: str, strict: bool = True) -> torch.device:
    """The device ``name`` ("auto": CUDA when available, else the CPU; "cpu"; "cuda"; "cuda:N")
    means on this machine. A CUDA device this machine lacks is a ``DeviceError`` when ``strict``
    (asked for now), else the CPU with a warning (named by a config written elsewhere)."""
    check_device(name)
    if name == "auto":
        return torch.device("cuda" if cuda_devices() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and (device.index or 0) >= cuda_devices():
        found = f"{cuda_devices()} CUDA device(s)" if torch.backends.cuda.is_built() else "a CPU-only build of torch"
        if strict:
            raise DeviceError(
                f"device {name!r} was asked for, but this machine has {found}; choose --device cpu or auto"
            )
        log.warning(
            "the neural model's config names device %r, but this machine has %s: tagging on the CPU (--device chooses)",
            name,
            found,
        )
        return torch.device("cpu")
    return device


def lift_address_space_cap() -> None:
    """Raise this process's address-space limit (``RLIMIT_AS``) to its hard limit before CUDA starts.
    The CUDA driver reserves far more virtual address space than any per-worker memory cap of batch
    runs and the service (``--memory-limit-mb``, 4 GB by default), and fails to start under one; such
    workers therefore run without that cap (the GPU's own memory is bounded by the device)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != hard:
        log.debug("address-space limit lifted for CUDA (%s -> %s bytes)", soft, hard)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


# The process whose torch last ran with several CPU threads. GNU OpenMP's thread pool does not
# survive a fork: in a process forked after it was started, a second thread would wait forever.
_THREADED_PID: int | None = None


def use_threads(requested: int) -> int:
    """Set and return torch's CPU threads for this process: ``requested`` (0: torch's default), or
    1 in a process forked from one whose torch ran on several (the fork cannot use OpenMP's pool)."""
    global _THREADED_PID
    threads = requested or torch.get_num_threads()
    if threads > 1 and _THREADED_PID not in (None, os.getpid()):
        log.debug("torch ran on several threads before this process was forked: tagging on one")
        threads = 1
    torch.set_num_threads(threads)
    if threads > 1:
        _THREADED_PID = os.getpid()
    return threads


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one CPU thread for the block (no OpenMP pool is started), then as it was."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def bucketed(
    lengths: Sequence[int], batch_size: int, rng: random.Random | None = None, max_tokens: int = 0
) -> list[list[int]]:
    """Indices grouped into batches of similar length (less padding): ``batch_size`` notes each, or
    with ``max_tokens`` > 0 as many as keep the padded batch (notes x longest) within that many
    tokens, at least one. With ``rng``, lengths are jittered and the batch order shuffled, so each
    epoch sees different batches."""
    jitter = (lambda: rng.uniform(-0.1, 0.1)) if rng else (lambda: 0.0)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i] * (1.0 + jitter()))
    if max_tokens <= 0:
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    else:
        current: list[int] = []
        batches, longest = [], 0
        for i in order:
            if current and (len(current) + 1) * max(longest, lengths[i]) > max_tokens:
                batches.append(current)
                current, longest = [], 0
            current.append(i)
            longest = max(longest, lengths[i])
        if current:
            batches.append(current)
    if rng:
        rng.shuffle(batches)
    return batches


def prefetched(make: Iterable[Any], depth: int = 2) -> Iterator[Any]:
    """The items of ``make`` produced by a background thread, up to ``depth`` ahead, so that the
    next batches are built (and copied to the device) while the current one trains."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def put(item: Any) -> bool:
        """Queue ``item`` unless the consumer has stopped (then nothing takes it: a blocking put would
        hang the join below); whether it was queued."""
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in make:
                if not put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - raised again in the consumer
            put(exc)
            return
        put(done)

    worker = threading.Thread(target=produce, name="neural-batches", daemon=True)
    worker.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


class NeuralTagger:
    """A bi-GRU + CRF, TS-GRU, CEDI, Elman or Jordan tagger (``architecture``); settings as in ``NeuralSettings``."""

    source = "neural"
    unit = "token"
    # learned (fit, from_disk)
    model_: TaggerModel
    device_: torch.device
    fit_seconds_: float | None
    _ready_in: int | None  # the process the model was made ready in (_ready)

    def __init__(self, language: str = "en", **params: Any) -> None:
        self.language = language
        self.settings = NeuralSettings(**params)

    def get_params(self) -> dict[str, Any]:
        return {"language": self.language, **self.settings.to_dict()}

    @property
    def labels(self) -> tuple[str, ...]:
        self._check_fitted()
        return tuple(sorted({tag[2:] for tag in self.vocabularies_.tags if tag != OUTSIDE}))

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError("NeuralTagger is not fitted; call fit() or from_disk()")

    def _ready(self) -> torch.device:
        """The device this tagger runs on, ready in this process: torch's threads set and the model
        moved there (once per process: after a fork, the worker does it)."""
        pid = os.getpid()
        if getattr(self, "_ready_in", None) != pid:
            use_threads(self.settings.num_threads)
            if self.device_.type == "cuda" and torch.cuda._is_in_bad_fork():
                raise DeviceError(
                    "CUDA was started in the process this worker was forked from, and cannot be "
                    "used after a fork; load the model without tagging before the workers start"
                )
            try:
                if self.device_.type == "cuda":
                    lift_address_space_cap()
                    if self.device_.index is not None:
                        torch.cuda.set_device(self.device_.index)
                self.model_.to(self.device_)
            except RuntimeError as exc:  # torch's words (driver, memory): never note text
                raise DeviceError(
                    f"the neural model could not be put on {self.device_}: "
                    f"{(str(exc).strip().splitlines() or [''])[0][:300]}"
                ) from None
            self._ready_in = pid
        return self.device_

    @contextlib.contextmanager
    def cpu_only(self) -> Iterator[None]:
        """Tag on the CPU inside the block, then on this tagger's device again, ready anew in the next
        process that tags: a process that forks CUDA workers afterwards (the service, after its
        warm-up note) must not start CUDA itself, or no worker could."""
        device = self.device_
        self.device_ = torch.device("cpu")
        try:
            yield
        finally:
            self.device_ = device
            self._ready_in = None

    def _autocast(self, device: torch.device, training: bool) -> contextlib.AbstractContextManager:
        """Mixed precision on CUDA only (bfloat16 where supported): for training with
        ``mixed_precision``, for tagging only with ``tag_mixed_precision``; the CPU stays in float32."""
        wanted = self.settings.mixed_precision if training else self.settings.tag_mixed_precision
        if device.type != "cuda" or not wanted:
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dtype)

    # -- training ---------------------------------------------------------------------------
    def fit(self, docs: Iterable[Document]) -> NeuralTagger:
        """Train on ``docs``, holding out ``dev_fraction`` of them for early stopping."""
        settings = self.settings
        fit_started = time.perf_counter()
        self.device_ = resolve_device(settings.device)
        torch.manual_seed(settings.seed)
        rng = random.Random(settings.seed)
        docs = list(docs)
        shuffled = rng.sample(docs, len(docs))
        held_out = int(len(docs) * settings.dev_fraction) if len(docs) > 1 else 0
        dev_docs, train_docs = shuffled[:held_out], shuffled[held_out:]

        notes = [note_tokens(analyse(doc, self.language)) for doc in train_docs]
        tag_strings = [encode_tags(note.units, doc.spans, settings.scheme) for note, doc in zip(notes, train_docs)]
        clusters = ClusterFeatures.of(WordClusters.from_disk(Path(settings.clusters))) if settings.clusters else None
        self.vocabularies_ = Vocabularies.build(notes, tag_strings, settings, clusters)
        train = [
            NoteTensors.of(self.vocabularies_.encode(note, doc.spans, settings.scheme))
            for note, doc in zip(notes, train_docs)
        ]
        self.model_ = build_model(settings, self.vocabularies_)
        device = self._ready()
        model = self.model_
        singletons = self._singletons(train, device)  # counted on the host, before the notes move
        if device.type == "cuda":  # the notes go to the GPU once; batches are built there
            train = [note.to(device) for note in train]
        optimizer = self._optimizer(model)
        scaler = torch.amp.GradScaler(
            "cuda", enabled=device.type == "cuda" and settings.mixed_precision and not torch.cuda.is_bf16_supported()
        )

        started = time.perf_counter()
        best_f1, best_state, stale = -1.0, None, 0
        self.history_: list[dict[str, float]] = []
        for epoch in range(1, settings.epochs + 1):
            epoch_started = time.perf_counter()
            loss = self._train_epoch(train, optimizer, scaler, singletons, rng, device)
            record = {"epoch": epoch, "loss": round(loss, 5), "seconds": round(time.perf_counter() - started, 1)}
            if dev_docs:
                record["dev_f1"] = round(self._strict_f1(dev_docs), 5)
                if record["dev_f1"] > best_f1:
                    best_f1, stale = record["dev_f1"], 0
                    best_state = {key: value.detach().clone() for key, value in model.state_dict().items()}
                else:
                    stale += 1
            self.history_.append(record)
            log.log(
                logging.INFO if settings.verbose else logging.DEBUG, "neural %s epoch %s", settings.architecture, record
            )
            # Stop before an epoch as long as the last one would overrun the time limit.
            now = time.perf_counter()
            out_of_time = 0 < 60 * settings.max_train_minutes < (now - started) + (now - epoch_started)
            if stale >= settings.patience or out_of_time:
                break
        if best_state is not None:
            model.load_state_dict(best_state)
        model.eval()
        self.fit_seconds_ = round(time.perf_counter() - fit_started, 1)
        return self

    def _train_epoch(
        self,
        train: list[NoteTensors],
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler,
        singletons: torch.Tensor,
        rng: random.Random,
        device: torch.device,
    ) -> float:
        """One pass over the training notes in length buckets (on a GPU, built by a background thread
        while the previous batch trains); returns the mean batch loss."""
        self.model_.train()
        total, batches = 0.0, 0
        order = bucketed([note.length for note in train], self.settings.batch_size, rng, self.settings.batch_tokens)
        built = (Batch.collate([train[i] for i in indices], device) for indices in order)
        # On a GPU the next batches are built while this one trains; on the CPU a second thread only
        # competes with torch's own (measured no faster), so batches are built in turn.
        for batch in prefetched(built) if device.type == "cuda" else built:
            self._hide_singletons(batch, singletons)
            optimizer.zero_grad(set_to_none=True)
            with self._autocast(device, training=True):
                loss = self.model_.loss(batch)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(self.model_.parameters(), self.settings.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            total, batches = total + loss.item(), batches + 1
        return total / max(batches, 1)

    def _optimizer(self, model: TaggerModel) -> torch.optim.Optimizer:
        rate = self.settings.learning_rate
        if self.settings.optimizer == "sgd":
            return torch.optim.SGD(model.parameters(), lr=rate, momentum=0.9)
        if self.settings.optimizer == "rmsprop":  # TS-GRU's optimizer (paper 000)
            return torch.optim.RMSprop(model.parameters(), lr=rate)
        return torch.optim.Adam(model.parameters(), lr=rate)

    def _singletons(self, train: list[NoteTensors], device: torch.device) -> torch.Tensor:
        """Which word ids occur once in training (shown as <UNK> now and then, to learn an OOV vector)."""
        counts = Counter(torch.cat([note.features["words"] for note in train]).tolist())
        flags = torch.zeros(len(self.vocabularies_.words), dtype=torch.bool)
        flags[[word for word, n in counts.items() if n == 1]] = True
        return flags.to(device)

    def _hide_singletons(self, batch: Batch, singletons: torch.Tensor) -> None:
        words = batch.features["words"]
        hidden = singletons[words] & (torch.rand(words.shape, device=words.device) < self.settings.singleton_unk)
        batch.features["words"] = words.masked_fill(hidden, UNK_ID)

    def _strict_f1(self, docs: list[Document]) -> float:
        predicted = [doc.with_spans(spans) for doc, spans in zip(docs, self.predict_many(docs))]
        return evaluate(docs, predicted).score("strict").f1

    # -- prediction -------------------------------------------------------------------------
    def predict(self, note: AnalysedNote | Document, regions: Sequence[tuple[int, int]] | None = None) -> list[Span]:
        """Spans of one note (see ``predict_many`` for batched tagging); reads the whole note
        (its spec does not accept ``regions``)."""
        return self.predict_many([note])[0]

    def predict_many(
        self, docs: Sequence[AnalysedNote | Document], batch_size: int = 0, workers: int = 0
    ) -> list[list[Span]]:
        """Spans of each note, tagged in length-bucketed batches (order kept): ``batch_size`` notes
        each when given, else as the settings say (``predict_batch_tokens``, ``predict_batch_size``).
        With ``workers`` > 1, that many forked processes prepare the notes while this one tags them
        (``feeding``): for a GPU, which tags faster than one process prepares."""
        self._check_fitted()
        if workers > 1 and len(docs) > 1:
            self._ready()
            budget = self._batch_tokens(batch_size) or PREDICT_WINDOW_TOKENS // FEED_WINDOW_BATCHES
            return fed_predictions(
                docs,
                self.vocabularies_,
                self.language,
                lambda prepared: self.tag_prepared(prepared, batch_size),
                workers,
                FEED_WINDOW_BATCHES * budget,
            )
        return self.tag_prepared([prepare_note(self.vocabularies_, self.language, doc) for doc in docs], batch_size)

    def _batch_tokens(self, batch_size: int) -> int:
        """Padded tokens per tagging batch (0: batches of a number of notes)."""
        if batch_size:
            return 0
        return self.settings.predict_batch_tokens or (CUDA_PREDICT_TOKENS if self._ready().type == "cuda" else 0)

    def tag_prepared(self, notes: Sequence[PreparedNote], batch_size: int = 0) -> list[list[Span]]:
        """Spans of each prepared note (``encoding.prepare_note``), batched as ``predict_many`` says."""
        self._check_fitted()
        device = self._ready()
        results: list[list[Span]] = [[] for _ in notes]
        self.model_.eval()
        with torch.no_grad():
            for indices in bucketed(
                [note.length for note in notes],
                batch_size or self.settings.predict_batch_size,
                max_tokens=self._batch_tokens(batch_size),
            ):
                present = [i for i in indices if notes[i].length]
                if not present:
                    continue
                try:
                    batch = Batch.padded([notes[i] for i in present], device)
                    with self._autocast(device, training=False):
                        paths, chosen = self.model_.tag(batch)
                except RuntimeError as exc:  # torch's words (devices, memory, shapes): never note text
                    raise ComponentError(
                        f"the neural tagger failed on {device}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
                    ) from None
                for row, i in enumerate(present):
                    results[i] = self._spans(notes[i], paths[row], chosen[row])
        return results

    def _spans(self, note: PreparedNote, path: np.ndarray, probabilities: np.ndarray) -> list[Span]:
        """Tag ids at the real tokens (line markers dropped) decoded into scored spans. Only tokens
        inside a span, and the outside token after each, are decoded: the same spans, without a
        Python step for each of the many tokens outside any."""
        tags = path[note.positions]
        inside = tags != self.vocabularies_.tag_index[OUTSIDE]
        if not inside.any():
            return []
        after = np.zeros_like(inside)
        after[1:] = inside[:-1] & ~inside[1:]  # the outside token that closes each run of span tokens
        kept = np.flatnonzero(inside | after)
        names = self.vocabularies_.tags
        return decode_tags(
            note.units[kept].tolist(),
            [names[tag] for tag in tags[kept].tolist()],
            self.source,
            probabilities[note.positions[kept]].tolist(),
        )

    # -- persistence ------------------------------------------------------------------------
    def to_disk(self, path: Path) -> None:
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / VOCABULARIES_FILE).write_text(
            json.dumps(self.vocabularies_.to_json(), ensure_ascii=False), encoding="utf-8"
        )
        torch.save({key: value.cpu() for key, value in self.model_.state_dict().items()}, path / WEIGHTS_FILE)
        if self.vocabularies_.cluster_features is not None:
            self.vocabularies_.cluster_features.clusters.to_disk(path / CLUSTERS_DIR)
        training = {"fit_seconds": getattr(self, "fit_seconds_", None), "epochs": getattr(self, "history_", [])}
        (path / TRAINING_FILE).write_text(json.dumps(training, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_disk(cls, path: Path, params: Mapping[str, Any], device: str | None = None) -> NeuralTagger:
        """The tagger saved in ``path`` by ``to_disk``, with ``params`` (its config section); word
        clusters are read from the copy saved with the model. ``device`` ("auto", "cpu", "cuda",
        "cuda:N") is where it tags, a ``DeviceError`` if this machine lacks it; None: the config's
        device, or the CPU where that CUDA device is missing. The weights stay on the CPU, and torch
        on one thread, until the first tagging (in a worker forked after this, in batch runs)."""
        path = Path(path)
        tagger = cls(**params)
        tagger.device_ = (
            resolve_device(device, strict=True)
            if device is not None
            else resolve_device(tagger.settings.device, strict=False)
        )
        tagger.vocabularies_ = Vocabularies.from_json(
            json.loads((path / VOCABULARIES_FILE).read_text(encoding="utf-8"))
        )
        if tagger.vocabularies_.clusters is not None:
            tagger.vocabularies_.cluster_features = ClusterFeatures.of(WordClusters.from_disk(path / CLUSTERS_DIR))
        with one_thread():
            model = build_model(tagger.settings, tagger.vocabularies_)
            model.load_state_dict(torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True))
        tagger.model_ = model.eval()
        training = (
            json.loads((path / TRAINING_FILE).read_text(encoding="utf-8")) if (path / TRAINING_FILE).is_file() else {}
        )
        tagger.history_, tagger.fit_seconds_ = training.get("epochs", []), training.get("fit_seconds")
        return tagger
