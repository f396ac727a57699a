"""``NeuralTagger``: a neural architecture behind the project's classifier protocol.

``fit(docs)`` holds out ``dev_fraction`` of the notes and stops early on their strict F1 (the
project's evaluator); ``predict(note)`` returns character-offset spans scored by the least
confident token's tag probability; ``to_disk`` writes ``vocabularies.json`` (words hashed) and
``model.pt`` (a state dict, loaded with ``weights_only=True``), never a pickled object; its
parameters are the pipeline config's ``[neural]`` section.
"""
from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch

from hybriddeid.backends.neural.encoding import UNK_ID, NoteTokens, Vocabularies, note_tokens
from hybriddeid.backends.neural.models import Batch, NoteTensors, TaggerModel, build_model
from hybriddeid.backends.neural.settings import NeuralSettings
from hybriddeid.classifiers.base import NotFittedError
from hybriddeid.analysis import AnalysedNote, analyse
from hybriddeid.classifiers.crf import CLUSTERS_DIR
from hybriddeid.classifiers.schemes import OUTSIDE, decode_tags, encode_tags
from hybriddeid.document import Document, Span
from hybriddeid.evaluation import evaluate
from hybriddeid.features.resources import ClusterFeatures
from hybriddeid.knowledge.clusters import WordClusters

log = logging.getLogger(__name__)

VOCABULARIES_FILE = "vocabularies.json"
WEIGHTS_FILE = "model.pt"
TRAINING_FILE = "training.json"  # fit seconds and per-epoch loss, held-out F1, seconds (no text)


def resolve_device(name: str) -> torch.device:
    """``"auto"``: CUDA when available, else the CPU; anything else as torch spells it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def bucketed(lengths: Sequence[int], batch_size: int, rng: random.Random | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length (less padding); with ``rng``, lengths are
    jittered and the batch order shuffled, so each epoch sees different batches."""
    jitter = (lambda: rng.uniform(-0.1, 0.1)) if rng else (lambda: 0.0)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i] * (1.0 + jitter()))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if rng:
        rng.shuffle(batches)
    return batches


class NeuralTagger:
    """A bi-GRU + CRF, TS-GRU, CEDI, Elman or Jordan tagger (``architecture``); settings as in ``NeuralSettings``."""

    source = "neural"
    unit = "token"

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

    def _prepare_torch(self) -> torch.device:
        if self.settings.num_threads > 0:
            torch.set_num_threads(self.settings.num_threads)
        return resolve_device(self.settings.device)

    def _autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """Mixed precision on CUDA only (bfloat16 where supported); the CPU stays in float32."""
        if device.type != "cuda" or not self.settings.mixed_precision:
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dtype)

    # -- training ---------------------------------------------------------------------------
    def fit(self, docs: Iterable[Document]) -> "NeuralTagger":
        """Train on ``docs``, holding out ``dev_fraction`` of them for early stopping."""
        settings = self.settings
        fit_started = time.perf_counter()
        device = self._prepare_torch()
        torch.manual_seed(settings.seed)
        rng = random.Random(settings.seed)
        docs = list(docs)
        shuffled = rng.sample(docs, len(docs))
        held_out = int(len(docs) * settings.dev_fraction) if len(docs) > 1 else 0
        dev_docs, train_docs = shuffled[:held_out], shuffled[held_out:]

        notes = [note_tokens(analyse(doc, self.language)) for doc in train_docs]
        tag_strings = [encode_tags(note.units, doc.spans, settings.scheme) for note, doc in zip(notes, train_docs)]
        clusters = ClusterFeatures(WordClusters.from_disk(Path(settings.clusters))) if settings.clusters else None
        self.vocabularies_ = Vocabularies.build(notes, tag_strings, settings, clusters)
        train = [NoteTensors.of(self.vocabularies_.encode(note, doc.spans, settings.scheme))
                 for note, doc in zip(notes, train_docs)]
        model = self.model_ = build_model(settings, self.vocabularies_).to(device)
        singletons = self._singletons(train, device)
        optimizer = self._optimizer(model)
        scaler = torch.amp.GradScaler("cuda", enabled=device.type == "cuda" and settings.mixed_precision
                                      and not torch.cuda.is_bf16_supported())

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
            log.log(logging.INFO if settings.verbose else logging.DEBUG, "neural %s epoch %s", settings.architecture, record)
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

    def _train_epoch(self, train: list[NoteTensors], optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                     singletons: torch.Tensor, rng: random.Random, device: torch.device) -> float:
        """One pass over the training notes in length buckets; returns the mean batch loss."""
        self.model_.train()
        total, batches = 0.0, 0
        for indices in bucketed([note.length for note in train], self.settings.batch_size, rng):
            batch = Batch.collate([train[i] for i in indices], device)
            self._hide_singletons(batch, singletons)
            optimizer.zero_grad(set_to_none=True)
            with self._autocast(device):
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

    def predict_many(self, docs: Sequence[AnalysedNote | Document], batch_size: int = 0) -> list[list[Span]]:
        """Spans of each note, tagged in length-bucketed batches (order kept)."""
        self._check_fitted()
        device = self._prepare_torch()
        notes = [note_tokens(analyse(doc, self.language)) for doc in docs]
        results: list[list[Span]] = [[] for _ in docs]
        self.model_.eval()
        with torch.no_grad():  # not inference_mode: CRF marginals take a gradient of log Z
            for indices in bucketed([len(note.words) for note in notes], batch_size or self.settings.predict_batch_size):
                present = [i for i in indices if notes[i].words]
                if not present:
                    continue
                batch = Batch.collate([NoteTensors.of(self.vocabularies_.encode(notes[i])) for i in present], device)
                with self._autocast(device):
                    tagged = self.model_.tag(batch)
                for i, (path, probabilities) in zip(present, tagged):
                    results[i] = self._spans(notes[i], path, probabilities)
        return results

    def _spans(self, note: NoteTokens, path: list[int], probabilities: list[float]) -> list[Span]:
        """Tag ids at the real tokens (line markers dropped) decoded into scored spans."""
        tags = [self.vocabularies_.tags[path[position]] for position in note.positions]
        scores = [probabilities[position] for position in note.positions]
        return decode_tags(note.units, tags, self.source, scores)

    # -- persistence ------------------------------------------------------------------------
    def to_disk(self, path: Path) -> None:
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / VOCABULARIES_FILE).write_text(json.dumps(self.vocabularies_.to_json(), ensure_ascii=False), encoding="utf-8")
        torch.save({key: value.cpu() for key, value in self.model_.state_dict().items()}, path / WEIGHTS_FILE)
        if self.vocabularies_.cluster_features is not None:
            self.vocabularies_.cluster_features.clusters.to_disk(path / CLUSTERS_DIR)
        training = {"fit_seconds": getattr(self, "fit_seconds_", None), "epochs": getattr(self, "history_", [])}
        (path / TRAINING_FILE).write_text(json.dumps(training, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_disk(cls, path: Path, params: Mapping[str, Any]) -> "NeuralTagger":
        """The tagger saved in ``path`` by ``to_disk``, with ``params`` (its config section); word
        clusters are read from the copy saved with the model."""
        path = Path(path)
        tagger = cls(**params)
        device = tagger._prepare_torch()
        tagger.vocabularies_ = Vocabularies.from_json(json.loads((path / VOCABULARIES_FILE).read_text(encoding="utf-8")))
        if tagger.vocabularies_.clusters is not None:
            tagger.vocabularies_.cluster_features = ClusterFeatures(WordClusters.from_disk(path / CLUSTERS_DIR))
        model = build_model(tagger.settings, tagger.vocabularies_)
        model.load_state_dict(torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True))
        tagger.model_ = model.to(device).eval()
        training = json.loads((path / TRAINING_FILE).read_text(encoding="utf-8")) if (path / TRAINING_FILE).is_file() else {}
        tagger.history_, tagger.fit_seconds_ = training.get("epochs", []), training.get("fit_seconds")
        return tagger
