"""The neural backend with PyTorch: CRF layer, windows, tiny models end to end, pipeline merge."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from hybriddeid import Pipeline  # noqa: E402
from hybriddeid.backends.neural.crf_layer import CRF  # noqa: E402
from hybriddeid.backends.neural.models import centered_windows, ngram_windows  # noqa: E402
from hybriddeid.backends.neural.tagger import NeuralTagger  # noqa: E402
from hybriddeid.core.document import Document, Span  # noqa: E402

NAMES = ["Ana Ruiz", "Pedro Gil", "Marta Sanz", "Luis Vega", "Eva Mora", "Juan Ortiz", "Rosa Prieto", "Hugo Lara"]
TINY = {
    "epochs": 40,
    "patience": 40,
    "dev_fraction": 0.0,
    "word_dim": 16,
    "hidden_dim": 16,
    "char_dim": 8,
    "char_hidden": 8,
    "context_dim": 8,
    "prefix_min_count": 2,
    "prefix_dim": 8,
    "attention_dim": 8,
    "ngram": 3,
    "window": 3,
    "skeleton_ratio": 0.3,
    "learning_rate": 0.02,
    "batch_size": 4,
    "dropout": 0.0,
    "singleton_unk": 0.0,
    "num_threads": 1,
    "device": "cpu",
}
# Every device this machine has: the CPU in CI, CUDA too where present (counted without starting it).
DEVICES = ["cpu", *(["cuda"] if torch.cuda.device_count() else [])]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def spans_of(spans: list[Span]) -> list[tuple[int, int, str]]:
    return [(span.start, span.end, span.label) for span in spans]


def make_corpus() -> list[Document]:
    docs = []
    for i, name in enumerate(NAMES):
        nhc = f"{4417920 + 37 * i}"
        text = f"Nombre: {name}.\nNHC: {nhc}.\nPaciente de {30 + i} años con fiebre.\n"
        spans = []
        for value, label in ((name, "NOMBRE_SUJETO_ASISTENCIA"), (nhc, "ID_SUJETO_ASISTENCIA")):
            start = text.index(value)
            spans.append(Span(start, start + len(value), label))
        docs.append(Document(f"note{i}", text, tuple(spans)))
    return docs


# -- CRF layer against brute force ---------------------------------------------------------
def brute_force(crf: CRF, emissions: torch.Tensor, length: int):
    """Every tag path of one sequence with its score: log Z, the best path, per-position marginals."""
    k = crf.num_tags
    scored = []
    for path in itertools.product(range(k), repeat=length):
        score = crf.start[path[0]] + crf.end[path[-1]] + sum(emissions[t, tag] for t, tag in enumerate(path))
        score = score + sum(crf.transitions[a, b] for a, b in zip(path, path[1:]))
        scored.append((float(score), path))
    log_z = torch.logsumexp(torch.tensor([s for s, _ in scored]), 0)
    marginals = torch.zeros(length, k)
    for score, path in scored:
        for t, tag in enumerate(path):
            marginals[t, tag] += torch.exp(torch.tensor(score) - log_z)
    return float(log_z), list(max(scored)[1]), marginals


@torch.no_grad()
def test_crf_layer_matches_brute_force_on_padded_batches(device):
    torch.manual_seed(0)
    crf = CRF(3)
    for parameter in crf.parameters():
        parameter.normal_()
    emissions = torch.randn(3, 4, 3)
    lengths = [4, 2, 1]
    mask = torch.arange(4).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    crf, emissions, mask = crf.to(device), emissions.to(device), mask.to(device)
    log_z = crf.log_partition(emissions, mask)
    crf.scan = "tree"
    assert torch.allclose(crf.log_partition(emissions, mask), log_z, atol=1e-5)
    crf.scan = "auto"
    paths = crf.decode(emissions, mask)
    marginals = crf.marginals(emissions, mask)
    tags = torch.randint(0, 3, (3, 4), device=device)
    path_scores = crf.path_score(emissions, tags, mask)
    for b, length in enumerate(lengths):
        expected_z, expected_path, expected_marginals = brute_force(crf.cpu(), emissions[b].cpu(), length)
        crf.to(device)
        assert float(log_z[b]) == pytest.approx(expected_z, abs=1e-4)
        assert paths[b] == expected_path
        assert torch.allclose(marginals[b, :length].cpu(), expected_marginals, atol=1e-4)
        one = tags[b, :length].tolist()
        by_hand = crf.start[one[0]] + crf.end[one[-1]] + sum(emissions[b, t, tag] for t, tag in enumerate(one))
        by_hand = by_hand + sum(crf.transitions[x, y] for x, y in zip(one, one[1:]))
        assert float(path_scores[b]) == pytest.approx(float(by_hand), abs=1e-4)


# -- windows -------------------------------------------------------------------------------
def test_ngram_context_windows_cross_lines_and_pad_the_note_edges():
    ids = torch.tensor([[1, 2, 3, 4, 5]])  # a, b, c, d, e; 0 is padding
    forward, backward = ngram_windows(ids, 2)
    assert forward[0].tolist() == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]]
    assert backward[0].tolist() == [[3, 2, 1], [4, 3, 2], [5, 4, 3], [0, 5, 4], [0, 0, 5]]
    vectors = torch.arange(10.0).view(1, 5, 2)  # windows of vectors keep the vector dimension last
    assert ngram_windows(vectors, 1)[0][0, 0].tolist() == [[0.0, 0.0], [0.0, 1.0]]


def test_centered_windows_for_ts_gru():
    ids = torch.tensor([[1, 2, 3, 4]])
    assert centered_windows(ids, 3)[0].tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0]]
    assert centered_windows(ids, 1)[0].tolist() == [[1], [2], [3], [4]]


# -- tiny models end to end ----------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus() -> list[Document]:
    return make_corpus()


# Elman and Jordan default to paper 001's plain SGD, far too slow a learner for six notes and 40 epochs.
@pytest.mark.parametrize(
    "architecture, extra",
    [
        ("bigru", {}),
        ("tsgru", {}),
        ("cedi", {}),
        ("cedi", {"suffixes": True}),
        ("elman", {"optimizer": "adam"}),
        ("jordan", {"optimizer": "adam"}),
    ],
)
def test_tiny_model_fits_saves_loads_and_predicts(architecture, extra, corpus, tmp_path, device):
    tagger = NeuralTagger(language="es", architecture=architecture, **{**TINY, "device": device}, **extra).fit(
        corpus[:6]
    )
    assert tagger.device_.type == device and next(tagger.model_.parameters()).device.type == device
    assert set(tagger.labels) == {"NOMBRE_SUJETO_ASISTENCIA", "ID_SUJETO_ASISTENCIA"}
    found = {(s.start, s.end, s.label) for doc in corpus[:6] for s in tagger.predict(doc)}
    gold = {(s.start, s.end, s.label) for doc in corpus[:6] for s in doc.spans}
    assert len(found & gold) >= len(gold) // 2  # it learned something from six notes
    tagger.to_disk(tmp_path / "model")
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [
        "model.pt",
        "training.json",
        "vocabularies.json",
    ]  # parameters are the pipeline config's
    assert "Ruiz" not in (tmp_path / "model" / "vocabularies.json").read_text()  # words are stored hashed
    reloaded = NeuralTagger.from_disk(tmp_path / "model", tagger.get_params())
    for doc in corpus[6:]:
        spans = tagger.predict(doc)
        assert reloaded.predict(doc) == spans
        assert all(s.source == "neural" and 0.0 < s.score <= 1.0 for s in spans)
    one_by_one, batched = tagger.predict_many(corpus[6:], batch_size=1), tagger.predict_many(corpus[6:])
    assert [[(s.start, s.end, s.label) for s in spans] for spans in one_by_one] == [
        [(s.start, s.end, s.label) for s in spans] for spans in batched
    ]  # padding changes nothing
    assert [s.score for spans in one_by_one for s in spans] == pytest.approx(
        [s.score for spans in batched for s in spans], rel=1e-4
    )


def test_word_clusters_are_embedded_and_saved_with_the_model(corpus, tmp_path):
    from hybriddeid.knowledge.clusters import WordClusters

    names = {word.lower() for name in NAMES for word in name.split()}
    WordClusters(
        brown={word: ("0110", 3) for word in names}, w2v={50: {**{word: 1 for word in names}, "nhc": 2}}
    ).to_disk(tmp_path / "clusters")
    tagger = NeuralTagger(language="es", clusters=str(tmp_path / "clusters"), **{**TINY, "epochs": 2}).fit(corpus[:4])
    assert tagger.vocabularies_.clusters is not None and tagger.model_.clusters is not None
    tagger.to_disk(tmp_path / "model")
    (tmp_path / "clusters" / "brown.txt").unlink()  # the model keeps its own copy
    reloaded = NeuralTagger.from_disk(tmp_path / "model", tagger.get_params())
    assert reloaded.predict(corpus[7]) == tagger.predict(corpus[7])


def test_notes_prepared_by_worker_processes_get_the_same_spans(corpus, tmp_path, monkeypatch):
    import hybriddeid.backends.neural.tagger as tagger_module
    from hybriddeid.classifiers.base import ComponentError
    from hybriddeid.knowledge.clusters import WordClusters

    names = {word.lower() for name in NAMES for word in name.split()}
    WordClusters(brown={word: ("0110", 3) for word in names}, w2v={50: dict.fromkeys(names, 1)}).to_disk(
        tmp_path / "clusters"
    )
    tagger = NeuralTagger(language="es", clusters=str(tmp_path / "clusters"), **{**TINY, "epochs": 3}).fit(corpus[:6])
    notes = corpus * 5
    monkeypatch.setattr(tagger_module, "PREDICT_WINDOW_TOKENS", 160)  # tagged in several windows as they arrive
    for batch_size, workers in [(0, 3), (2, 2)]:
        alone = tagger.predict_many(notes, batch_size)
        fed = tagger.predict_many(notes, batch_size, workers=workers)
        assert any(alone) and [spans_of(spans) for spans in fed] == [spans_of(spans) for spans in alone]
        # batches of other notes pad differently: scores agree to float precision
        assert [s.score for spans in fed for s in spans] == pytest.approx([s.score for spans in alone for s in spans])
    with pytest.raises(ComponentError, match=r"preparing note 2 for the neural tagger failed \(\w+Error\)"):
        tagger.predict_many([corpus[0], corpus[1], object(), corpus[2]], workers=2)


def test_spans_decoded_from_span_tokens_alone_equal_a_full_decode(corpus):
    import random

    import numpy as np

    from hybriddeid.backends.neural.encoding import prepare_note
    from hybriddeid.classifiers.schemes import decode_tags

    tagger = NeuralTagger(language="es", **{**TINY, "epochs": 1}).fit(corpus[:4])
    note = prepare_note(tagger.vocabularies_, "es", corpus[0])
    names, rng = tagger.vocabularies_.tags, random.Random(7)
    for _ in range(200):  # ill-formed paths too: I after O, a label changing inside a span
        path = np.array([rng.choice([0, 0, 0, *range(len(names))]) for _ in range(note.length)])
        scores = np.array([rng.random() for _ in range(note.length)], dtype=np.float32)
        full = decode_tags(
            note.units.tolist(),
            [names[tag] for tag in path[note.positions]],
            "neural",
            scores[note.positions].tolist(),
        )
        assert tagger._spans(note, path, scores) == full


def test_training_is_deterministic(corpus):  # on the CPU (cuDNN's recurrent gradients are not deterministic)
    settings = {**TINY, "epochs": 3, "dropout": 0.3, "singleton_unk": 0.3}
    first = NeuralTagger(language="es", **settings).fit(corpus[:4])
    second = NeuralTagger(language="es", **settings).fit(corpus[:4])
    assert [h["loss"] for h in first.history_] == [h["loss"] for h in second.history_]
    assert first.predict(corpus[7]) == second.predict(corpus[7])


def test_early_stopping_keeps_the_best_epoch(corpus):
    tagger = NeuralTagger(language="es", **{**TINY, "dev_fraction": 0.25, "epochs": 6, "patience": 2}).fit(corpus)
    assert 1 <= len(tagger.history_) <= 6 and all("dev_f1" in h for h in tagger.history_)
    hurried = NeuralTagger(language="es", **{**TINY, "epochs": 6, "max_train_minutes": 1e-6}).fit(corpus[:4])
    assert len(hurried.history_) == 1  # no epoch starts that would end past the time limit


def test_pipeline_merges_the_neural_component(corpus, tmp_path, device):
    config = {
        "pipeline": {
            "language": "es",
            "components": ["rule", "neural"],
            "precedence": ["neural", "rule"],
            "min_score": {"neural": 0.0},
        },
        "neural": {**TINY, "device": device},
    }
    pipeline = Pipeline(config).fit(corpus[:6], n_jobs=1)
    by_source = pipeline.predict_by_source(corpus[7])
    assert set(by_source) == {"rule", "neural"}
    merged = pipeline.predict(corpus[7])
    assert {s.source for s in merged} <= {"rule", "neural"} and merged
    pipeline.to_disk(tmp_path / "model")
    assert Pipeline.load(tmp_path / "model").predict(corpus[7]) == merged
    for elsewhere in DEVICES:  # the device is chosen at load; the saved config keeps the one it trained on
        loaded = Pipeline.load(tmp_path / "model", device=elsewhere)
        assert loaded.components["neural"].device_.type == elsewhere and loaded.config["neural"]["device"] == device
        assert spans_of(loaded.predict(corpus[7])) == spans_of(merged)
    assert not list(Path(tmp_path / "model").rglob("*.pkl"))


def test_cli_trains_and_annotates_with_a_neural_component(corpus, tmp_path):
    from hybriddeid.cli import main
    from hybriddeid.io import read_corpus, write_document

    for doc in corpus[:6]:
        write_document(doc, tmp_path / "train", "brat")
    for doc in corpus[6:]:
        write_document(doc.with_spans([]), tmp_path / "notes", "text")
    settings = "\n".join(
        f"{key} = {value!r}".replace("'", '"').replace("False", "false").replace("True", "true")
        for key, value in TINY.items()
    )
    config = tmp_path / "neural.toml"
    config.write_text(
        '[pipeline]\nlanguage = "es"\ncomponents = ["rule", "neural"]\nprecedence = ["rule", "neural"]\n'
        f'[neural]\narchitecture = "tsgru"\n{settings}\n'
    )
    assert (
        main(
            [
                "-q",
                "train",
                "--train",
                str(tmp_path / "train"),
                "--config",
                str(config),
                "--out",
                str(tmp_path / "model"),
            ]
        )
        == 0
    )
    assert (tmp_path / "model" / "neural" / "model.pt").is_file()
    assert (
        main(["-q", "annotate", "--model", str(tmp_path / "model"), str(tmp_path / "notes"), str(tmp_path / "out")])
        == 0
    )
    assert len(read_corpus(tmp_path / "out")) == 2


def test_cedi_deep_suffixes_are_embedded_saved_and_reloaded(corpus, tmp_path):
    import json

    settings = {**TINY, "architecture": "cedi", "epochs": 2}
    with_suffixes = NeuralTagger(language="es", suffixes=True, **settings).fit(corpus[:6])
    vocabularies = with_suffixes.vocabularies_
    assert vocabularies.suffixes is not None and "ión" not in vocabularies.suffixes.items  # below the threshold
    assert {"bre", "nhc", "ños"} <= set(vocabularies.suffixes.items)  # Nombre, NHC, años: seen 6 times each
    without = NeuralTagger(language="es", **settings).fit(corpus[:6])
    assert without.vocabularies_.suffixes is None and without.model_.suffixes is None

    def count(tagger: NeuralTagger) -> int:
        return sum(parameter.numel() for parameter in tagger.model_.parameters())

    assert count(with_suffixes) > count(without)
    with_suffixes.to_disk(tmp_path / "model")
    saved = json.loads((tmp_path / "model" / "vocabularies.json").read_text(encoding="utf-8"))
    assert saved["suffixes"] == vocabularies.suffixes.items
    reloaded = NeuralTagger.from_disk(tmp_path / "model", with_suffixes.get_params())
    assert reloaded.settings.suffixes and reloaded.vocabularies_.suffixes.items == vocabularies.suffixes.items
    assert count(reloaded) == count(with_suffixes)
    assert reloaded.predict(corpus[7]) == with_suffixes.predict(corpus[7])


@pytest.mark.parametrize("architecture", ["elman", "jordan"])
def test_elman_and_jordan_feed_back_across_tokens_with_a_one_word_window(architecture, corpus, device):
    """With a window of one word, a later token's scores depend on an earlier token only through the
    recurrence: Elman's previous hidden state, Jordan's previous output posteriors."""
    from hybriddeid.backends.neural.encoding import note_tokens
    from hybriddeid.backends.neural.models import Batch, NoteTensors
    from hybriddeid.features.analysis import analyse

    tagger = NeuralTagger(
        language="es", architecture=architecture, **{**TINY, "window": 1, "epochs": 1, "device": device}
    )
    tagger.fit(corpus[:4])
    model = tagger.model_.eval()
    note = NoteTensors.of(tagger.vocabularies_.encode(note_tokens(analyse(corpus[7], "es"))))
    batch = Batch.collate([note], tagger.device_)  # built on the model's device
    changed = Batch.collate([note], tagger.device_)
    changed.features["words"] = batch.features["words"].clone()
    changed.features["words"][0, 0] = 2 if int(batch.features["words"][0, 0]) != 2 else 3
    with torch.no_grad():
        before, after = model.emissions(batch)[0], model.emissions(changed)[0]
        assert not torch.allclose(before[0], after[0])
        assert (before[2] - after[2]).abs().max() > 1e-6  # two tokens later, outside any one-word window
    if architecture == "jordan":
        feedback = model.recurrent.feedback.weight  # V of Eq. 12: previous posteriors -> hidden layer
        assert feedback.shape == (tagger.settings.hidden_dim, len(tagger.vocabularies_.tags))
        with torch.no_grad():
            feedback.zero_()  # without it, nothing carries the first token forward
            assert torch.equal(model.emissions(batch)[0, 1:], model.emissions(changed)[0, 1:])
    else:
        assert model.recurrent.weight_hh_l0.shape == (tagger.settings.hidden_dim, tagger.settings.hidden_dim)


# -- the vectorised CRF against the plain log-space recursions it replaced -------------------
def plain_log_partition(crf: CRF, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The forward algorithm with a log-sum-exp per step and padding masked per step (the old layer)."""
    alpha = crf.start + emissions[:, 0]
    for t in range(1, emissions.size(1)):
        step = torch.logsumexp(alpha.unsqueeze(2) + crf.transitions, dim=1) + emissions[:, t]
        alpha = torch.where(mask[:, t].unsqueeze(1), step, alpha)
    return torch.logsumexp(alpha + crf.end, dim=1)


def plain_viterbi(crf: CRF, emissions: torch.Tensor, length: int) -> list[int]:
    """One sequence's best path by the textbook recursion, back-pointers followed one by one."""
    score, pointers = crf.start + emissions[0], []
    for t in range(1, length):
        best, pointer = (score.unsqueeze(1) + crf.transitions).max(dim=0)
        score = best + emissions[t]
        pointers.append(pointer.tolist())
    path = [int((score + crf.end).argmax())]
    for pointer in reversed(pointers):
        path.append(pointer[path[-1]])
    return path[::-1]


def test_viterbi_from_cuda_graphs_gives_the_paths_of_the_steps(device):
    """``viterbi = "graph"`` replays captured steps (CUDA only; elsewhere it steps): the same paths
    as stepping, for batches of other sizes and widths than the one captured first (one batch
    size's graph reused for another, a width not a multiple of the captured steps, one position),
    and after the transitions change (a graph reads them from its own buffer, refreshed each call)."""
    torch.manual_seed(2)
    crf = CRF(43, viterbi="graph")
    with torch.no_grad():
        crf.transitions.normal_(0, 3)
        crf.start.normal_()
        crf.end.normal_()
    crf = crf.to(device)
    for lengths in ([200, 130, 64, 3], [65, 64, 63, 1, 2], [1], [150] * 9):
        emissions = (torch.randn(len(lengths), max(lengths), 43) * 8).to(device)
        mask = (torch.arange(max(lengths)).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).to(device)
        crf.viterbi = "graph"
        graphed = crf.decode(emissions, mask)
        crf.viterbi = "steps"
        assert graphed == crf.decode(emissions, mask), lengths
        with torch.no_grad():
            crf.transitions.mul_(-1)
    with pytest.raises(ValueError, match="viterbi must be one of"):
        CRF(3, viterbi="tree")


def test_vectorised_crf_matches_the_plain_recursions_on_long_padded_batches(device):
    """Notes as long as MEDDOCAN's (hundreds of positions), MEDDOCAN's tag count, learned-looking
    scales: the same Viterbi paths, log Z within float32 rounding, marginals as autograd gives them."""
    torch.manual_seed(1)
    crf = CRF(43)
    with torch.no_grad():
        crf.transitions.normal_(0, 3)
        crf.transitions[0, 5:] -= 25  # forbidden-looking transitions, as BIO training learns them
        crf.start.normal_()
        crf.end.normal_()
    lengths = [600, 557, 301, 40, 1]
    emissions = torch.randn(len(lengths), max(lengths), 43) * 8
    mask = torch.arange(max(lengths)).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    paths = crf.to(device).decode(emissions.to(device), mask.to(device))
    new_z = crf.log_partition(emissions.to(device), mask.to(device)).cpu()
    new_marginals = crf.marginals(emissions.to(device), mask.to(device)).cpu()
    crf.cpu()
    for b, length in enumerate(lengths):
        assert paths[b] == plain_viterbi(crf, emissions[b], length)
    # The plain recursion in float64 is the reference: in float32 its per-step log-sum-exp drifts
    # (marginals off by up to 3e-3 at 600 positions), the scaled recursion stays within 1e-6.
    crf64 = CRF(43).double()
    crf64.load_state_dict({key: value.double() for key, value in crf.state_dict().items()})
    leaf = emissions.double().requires_grad_(True)
    expected = plain_log_partition(crf64, leaf, mask)
    (gradient,) = torch.autograd.grad(expected.sum(), leaf)
    assert torch.allclose(new_z.double(), expected.detach(), rtol=1e-6, atol=1e-3)
    assert torch.allclose(new_marginals.double(), gradient * mask.unsqueeze(2), atol=1e-5)
    crf.scan = "tree"  # marginals as the tree's gradient
    assert torch.allclose(
        crf.to(device).marginals(emissions.to(device), mask.to(device)).cpu().double(),
        gradient * mask.unsqueeze(2),
        atol=1e-5,
    )
    crf.cpu()
    for scan in ("steps", "tree"):  # either way of taking log Z, and its gradient (training), is the exact one
        crf.scan = scan
        leaf_new = emissions.to(device).requires_grad_(True)
        log_z = crf.to(device).log_partition(leaf_new, mask.to(device))
        (new_gradient,) = torch.autograd.grad(log_z.sum(), leaf_new)
        crf.cpu()
        assert torch.allclose(log_z.detach().cpu().double(), expected.detach(), rtol=1e-6, atol=1e-3), scan
        assert torch.allclose(new_gradient.cpu().double(), gradient, atol=1e-5), scan


def test_a_batch_or_model_without_what_it_needs_is_refused_saying_what():
    from hybriddeid.backends.neural.encoding import Vocabularies, Vocabulary
    from hybriddeid.backends.neural.models import Batch, NoteTensors, build_model
    from hybriddeid.backends.neural.settings import NeuralSettings

    words = torch.tensor([2, 3])
    tagged, untagged = NoteTensors({"words": words}, torch.tensor([0, 1]), 2), NoteTensors({"words": words}, None, 2)
    with pytest.raises(ValueError, match="mixes notes with and without gold tags"):
        Batch.collate([tagged, untagged], torch.device("cpu"))
    vocabularies = Vocabularies("bigru", ["O", "B-NAME"], Vocabulary(["<pad>", "<unk>", "a", "b"]))
    model = build_model(NeuralSettings(architecture="bigru"), vocabularies)
    with pytest.raises(ValueError, match="the loss needs a batch with gold tags"):
        model.loss(Batch.collate([untagged], torch.device("cpu")))
    assert model.loss(Batch.collate([tagged], torch.device("cpu"))).item() > 0
    for architecture, missing in (("tsgru", "skeleton"), ("cedi", "prefix")):
        with pytest.raises(ValueError, match=f"needs the {missing} vocabulary"):
            build_model(NeuralSettings(architecture=architecture), replace(vocabularies, architecture=architecture))


def test_batches_by_tokens_keep_lengths_together_within_the_budget():
    from hybriddeid.backends.neural.tagger import bucketed

    lengths = [500, 20, 480, 30, 25, 900, 35]
    batches = bucketed(lengths, batch_size=2, max_tokens=1000)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 1000
    assert [1, 4, 3, 6] in batches and [5] in batches  # the short notes share one batch, more than batch_size
    assert bucketed(lengths, batch_size=2) == [[1, 4], [3, 6], [2, 0], [5]]  # by notes when no budget


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="needs a machine without CUDA")
def test_a_model_trained_on_cuda_tags_on_a_cpu_only_machine(corpus, tmp_path, caplog):
    """Its config keeps device "cuda" (where it trained); loaded here it tags on the CPU, with a
    warning, unless CUDA is asked for at load: then the error says so in words."""
    from hybriddeid.backends.neural.tagger import DeviceError
    from hybriddeid.pipeline.core import CONFIG_FILE

    config = {"pipeline": {"language": "es", "components": ["neural"], "precedence": ["neural"]}, "neural": TINY}
    pipeline = Pipeline(config).fit(corpus[:6], n_jobs=1)
    pipeline.to_disk(tmp_path / "model")
    saved = tmp_path / "model" / CONFIG_FILE
    saved.write_text(saved.read_text(encoding="utf-8").replace('device = "cpu"', 'device = "cuda"'), encoding="utf-8")
    loaded = Pipeline.load(tmp_path / "model")
    assert loaded.config["neural"]["device"] == "cuda" and loaded.components["neural"].device_.type == "cpu"
    assert "names device 'cuda', but this machine has" in caplog.text
    assert spans_of(loaded.predict(corpus[7])) == spans_of(pipeline.predict(corpus[7]))
    with pytest.raises(DeviceError, match="device 'cuda:1' was asked for, but this machine has"):
        Pipeline.load(tmp_path / "model", device="cuda:1")


def test_prefetched_batches_stop_when_the_consumer_stops_early():
    # A training step that raises (out of memory, interrupted) closes the generator while the
    # producer may already have queued its last items: closing must not wait on it forever.
    import threading
    import time

    from hybriddeid.backends.neural.tagger import prefetched

    seen: list[list[int]] = []

    def close_after_one(items: list[int]) -> None:
        got = prefetched(iter(items))
        first = next(got)
        time.sleep(0.3)  # the producer fills the queue and reaches its end
        got.close()
        seen.append([first])

    for items in ([0, 1, 2], list(range(10))):
        consumer = threading.Thread(target=close_after_one, args=(items,), daemon=True)
        consumer.start()
        consumer.join(timeout=10)
        assert not consumer.is_alive(), f"closing the batches of {len(items)} items hung"
    assert seen == [[0], [0]]
    assert not any(thread.name == "neural-batches" for thread in threading.enumerate())  # each producer ended
    assert list(prefetched(iter(range(5)))) == [0, 1, 2, 3, 4]
