"""The P(O) threshold (hybriddeid.pipeline.operating_point), the sweep and the CLI flags, on a tiny model
trained in seconds on generated notes (few iterations: an unsure model has much to add)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from hybriddeid import Pipeline
from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.evaluation import PRF, evaluate
from hybriddeid.io import read_corpus, write_document
from hybriddeid.pipeline.core import ConfigError, build_config
from hybriddeid.pipeline.operating_point import Candidate, Run, SourceCandidates, focus_levels, shown_probability, widen
from hybriddeid.pipeline.sweep import Sweep, SweepPoint, parse_thresholds, run_sweep
from hybriddeid.surrogates.audit import read_audit
from hybriddeid.synth import generate_corpus

GRID = (1e-4, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0)
TINY = {
    # focus_below 0.9 so that thresholds above it make the character CRF read more (focus_levels)
    "pipeline": {"focus": {"char": "token"}, "focus_below": 0.9, "propagate": True, "safelist": "en"},
    "char": {"max_iterations": 10, "lexicon": False},
    "token": {"max_iterations": 10, "lexicon": False},
}


@pytest.fixture(scope="module")
def focused() -> Pipeline:
    return Pipeline(TINY).fit(generate_corpus(30, seed=11, mix="train"), n_jobs=1)


@pytest.fixture(scope="module")
def unfocused(focused) -> Pipeline:
    pipeline = Pipeline({**focused.config, "pipeline": {**focused.config["pipeline"], "focus": {}}})
    pipeline.components, pipeline.meta = focused.components, focused.meta
    return pipeline


@pytest.fixture(scope="module")
def notes() -> list[Document]:
    return list(generate_corpus(10, seed=12, mix="test"))


def _alnum_covered(doc: Document, spans: list[Span]) -> set[int]:
    return {i for span in spans for i in range(span.start, span.end) if doc.text[i].isalnum()}


@pytest.mark.parametrize("which", ["focused", "unfocused"])
def test_raising_the_threshold_never_lowers_recall(which, request, notes):
    pipeline = request.getfixturevalue(which)
    readings = [pipeline.read(doc, max(GRID)) for doc in notes]
    recalls, covered_before = [], None
    for threshold in (None, *GRID):
        predicted = [doc.with_spans(reading.spans(threshold)) for doc, reading in zip(notes, readings)]
        covered = [_alnum_covered(doc, list(pred.spans)) for doc, pred in zip(notes, predicted)]
        if covered_before is not None:  # no letter or digit ever leaves the output
            assert all(before <= now for before, now in zip(covered_before, covered)), threshold
        covered_before = covered
        recalls.append(evaluate(notes, predicted).score("binary_token").recall)
    assert recalls == sorted(recalls)
    assert recalls[-1] > recalls[0] + 0.2  # the threshold does add what the tiny model missed


@pytest.mark.parametrize("which", ["focused", "unfocused"])
def test_a_reading_gives_what_predict_gives_at_each_threshold(which, request, notes):
    pipeline = request.getfixturevalue(which)
    for doc in notes[:4]:
        reading = pipeline.read(doc, 0.999)
        assert pipeline.within_phi_set(doc, reading.spans(None)) == pipeline.predict(
            doc
        )  # no threshold: today's output
        assert pipeline.predict(doc, threshold=None) == pipeline.predict(doc)
        for threshold in (0.5, 0.95, 0.999):  # 0.95 and 0.999: above focus_below, more is read
            assert pipeline.within_phi_set(doc, reading.spans(threshold)) == pipeline.predict(doc, threshold=threshold)
        with pytest.raises(ValueError, match="above"):
            reading.spans(0.9999)


def test_the_unset_threshold_leaves_the_pipeline_as_it_was(focused, notes, tmp_path):
    assert build_config()["pipeline"]["phi_threshold"] is None
    for doc in notes[:4]:
        # predict() without a threshold takes the old path: per-source spans, combined
        assert focused.predict(doc) == focused.combine(doc, focused.predict_by_source(doc))
        assert focused.read(doc, 0.5).spans(None) == focused.predict(doc)
    focused.to_disk(tmp_path / "model")
    assert "phi_threshold" not in (tmp_path / "model" / "config.toml").read_text()  # old readers still load it
    assert Pipeline.load(tmp_path / "model").predict(notes[0]) == focused.predict(notes[0])


def test_the_threshold_from_the_config_and_its_checks(focused, notes, tmp_path):
    for bad in (0, 0.0, 1.5, -0.1, True, "0.5"):
        with pytest.raises(ConfigError, match="phi_threshold"):
            build_config({"pipeline": {"phi_threshold": bad}})
    configured = Pipeline({**focused.config, "pipeline": {**focused.config["pipeline"], "phi_threshold": 0.9}})
    configured.components, configured.meta = focused.components, focused.meta
    doc = notes[1]
    assert configured.predict(doc) == focused.predict(doc, threshold=0.9) != focused.predict(doc)
    assert configured.predict(doc, threshold=0.5) == focused.predict(doc, threshold=0.5)  # a call overrides
    assert configured.predict(doc, threshold=0) == focused.predict(doc)  # 0: no threshold at all
    assert configured.annotate(doc).spans == tuple(configured.predict(doc))
    assert configured.deidentify(doc.text, threshold=0.5).text == focused.deidentify(doc.text, threshold=0.5).text
    configured.to_disk(tmp_path / "model")
    assert Pipeline.load(tmp_path / "model").config["pipeline"]["phi_threshold"] == 0.9
    with pytest.raises(ValueError, match="threshold"):
        focused.predict(doc, threshold=2.0)


def test_a_read_keeps_the_marginals_predict_and_focus_use(focused, notes):
    from hybriddeid.classifiers.focus import focus_stretches
    from hybriddeid.classifiers.schemes import OUTSIDE

    token, doc = focused.components["token"], notes[0]
    spans, sequences = token.read(doc, 0.9)
    assert spans == token.predict(doc)
    settings = focused.config["pipeline"]
    _, stretches = token.predict_with_focus(doc, settings["focus_below"], settings["focus_margin"], 0.5)
    assert focus_stretches(sequences, settings["focus_below"], settings["focus_margin"], 0.5) == stretches
    seq = next(s for s in sequences if s.label_probs)
    index, probabilities = next(iter(seq.label_probs.items()))
    token.tagger_.set(next(s.features for s in token.sequences(doc) if s.units == seq.units))
    assert seq.p_outside[index] == pytest.approx(token.tagger_.marginal(OUTSIDE, index))
    assert seq.p_outside[index] < 0.9 and sum(probabilities.values()) + seq.p_outside[index] == pytest.approx(1.0)
    assert all(p < 0.9 for s in sequences for i, p in enumerate(s.p_outside) if i in s.label_probs)


def test_focus_levels_are_fixed_steps_above_focus_below():
    assert focus_levels(0.999, 0.5) == [0.999]
    assert focus_levels(0.999, 0.999) == [0.999]
    assert focus_levels(0.999, 0.9995) == [0.999, 0.9999]
    assert focus_levels(0.9, 0.9999) == [0.9, 0.99, 0.999, 0.9999]
    assert focus_levels(0.95, 0.97) == [0.95, 0.99]
    assert focus_levels(0.999, 1.0)[-1] == 1.0


def _source(label: str = "NAME") -> SourceCandidates:
    return SourceCandidates("token", lambda spans: spans, label)


def _run(text: str, *words: str, p_outside: float = 0.4) -> Run:
    units = {}
    for word in words:
        start = text.index(word)
        units[(start, start + len(word))] = Candidate(start, start + len(word), p_outside, {})
    return Run(min(s for s, _ in units), max(e for _, e in units), units)


def test_widen_joins_inside_a_token_and_adds_the_rest_as_spans():
    text = "Seen by Dr Smith, age 104yo, on 03/14 ."
    smi = Span(11, 14, "DOCTOR", "char", 0.97)  # "Smi": a boundary error inside a token
    age = Span(22, 25, "AGE", "rule")  # "104" of "104yo", as gold marks it
    out = widen(text, [smi, age], [_run(text, "Smith", ","), _run(text, "yo")], _source())
    # "th" joins "Smi" (inside a token); the comma holds no letter or digit; "yo" stays apart from "104"
    assert out == [Span(11, 16, "DOCTOR", "char", 0.6), age, Span(25, 27, "NAME", "token", 0.6)]
    untouched = Span(32, 37, "DATE", "rule")
    assert widen(text, [untouched], [_run(text, "Dr")], _source()) == [Span(8, 10, "NAME", "token", 0.6), untouched]
    assert widen(text, [untouched], [_run(text, "Dr")], _source())[1] is untouched
    assert widen(text, [untouched], [_run(text, ".")], _source()) == [untouched]  # punctuation only: nothing


def test_widen_joins_the_end_of_a_widened_run_that_holds_none_of_its_units():
    """A character run is widened to the tokens it touches: a part past its last unit ("NºCol" of the one
    token "MartínezNºCol", the name's characters below the threshold) joins the span it touches, scored
    by its run's units (it once stopped a threshold sweep with a ValueError)."""
    text = "Dra. Marta MartínezNºCol 0606"
    name = Span(5, 19, "NOMBRE_PERSONAL_SANITARIO", "rule")
    run = _run(text, "Marta", "Martínez", p_outside=0.3)
    run.end = text.index(" 0606")  # widened to the whole token
    assert widen(text, [name], [run], _source()) == [Span(5, 24, "NOMBRE_PERSONAL_SANITARIO", "rule", 0.7)]


def test_sweep_table_json_and_choice(focused, notes, tmp_path):
    sweep = run_sweep(focused, notes, (0.99, 0.5, 0.9), model="tiny")
    assert [p.threshold for p in sweep.points] == [None, 0.5, 0.9, 0.99]
    recalls = [p.binary_token.recall for p in sweep.points]
    assert recalls == sorted(recalls) and recalls[-1] > recalls[0]
    pred = [doc.with_spans(focused.predict(doc, threshold=0.9)) for doc in notes]
    assert sweep.points[2].binary_token == evaluate(notes, pred).score("binary_token")
    assert sweep.points[2].strict == evaluate(notes, pred).score("strict")
    assert sweep.documents == 10 and sweep.gold_spans == sum(len(d.spans) for d in notes)
    table = sweep.format_table().splitlines()
    assert "binary token" in table[1] and "strict micro" in table[1]
    assert [row.split()[0] for row in table[3:]] == ["unset", "0.5", "0.9", "0.99"]
    sweep.save(tmp_path / "sweep.json")
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert set(data) == {"model", "model_trained_at", "documents", "gold_spans", "phi_set", "seconds", "points"}
    assert data["points"][0]["threshold"] is None and set(data["points"][1]["binary_token"]) == {
        "tp",
        "fp",
        "fn",
        "precision",
        "recall",
        "f1",
    }
    assert Sweep.load(tmp_path / "sweep.json").points == sweep.points
    assert parse_thresholds("0.9, 0.5,0.9") == (0.5, 0.9)
    for bad in ("", "0.5,x", "0.5,1.5", "0"):
        with pytest.raises(ValueError):
            parse_thresholds(bad)


def _point(threshold: float | None, precision: float, recall: float) -> SweepPoint:
    prf = PRF(1, 1, 1, precision, recall, 0.0)
    return SweepPoint(threshold, prf, prf, 1)


def test_the_recall_target_takes_the_best_precision_that_reaches_it(focused, tmp_path):
    sweep = Sweep(
        (
            _point(None, 0.95, 0.80),
            _point(0.5, 0.93, 0.85),
            _point(0.9, 0.90, 0.91),
            _point(0.99, 0.90, 0.93),
            _point(0.999, 0.70, 0.97),
        ),
        "tiny",
        "2026-01-01T00:00:00Z",
        3,
        9,
    )
    assert sweep.choose(0.80).threshold is None  # the model without a threshold already reaches it
    assert sweep.threshold_for(0.80) == 0.0  # as predict() takes it: no threshold, whatever the config says
    assert sweep.choose(0.84).threshold == 0.5
    assert sweep.choose(0.90).threshold == 0.99  # equal precision: the higher recall
    assert sweep.threshold_for(0.95) == 0.999
    assert sweep.choose(0.98) is None
    with pytest.raises(ValueError, match="no threshold in the sweep reaches binary token recall 0.98"):
        sweep.threshold_for(0.98)
    with pytest.raises(ValueError, match="trained"):
        sweep.check_model(focused, "other")  # another model's thresholds would not hold
    with pytest.raises(ValueError, match="not a sweep file"):
        (tmp_path / "bad.json").write_text('{"points": 3}')
        Sweep.load(tmp_path / "bad.json")


def _steep_sweep() -> Sweep:
    """A sweep whose last threshold buys the last bit of recall with most of the precision."""
    return Sweep(
        (_point(None, 0.90, 0.90), _point(0.5, 0.88, 0.95), _point(0.99, 0.80, 0.97), _point(0.9995, 0.30, 1.0)),
        "tiny",
        "",
        40,
        900,
    )


def test_a_target_that_rounds_to_one_warns_with_what_it_costs(caplog):
    sweep = _steep_sweep()
    with caplog.at_level(logging.WARNING, logger="hybriddeid"):
        assert sweep.threshold_for(0.9999999) == 0.9995
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "recall target 0.9999999 asks the model to miss next to no PHI" in warning
    assert "precision 0.3000 against 0.9000 without a threshold" in warning
    assert "about 70% of the tokens it flags are not PHI" in warning and "40 notes" in warning
    assert "keeps less than 50%" in warning  # 0.30 < 0.5 x 0.90: both reasons are told
    assert shown_probability(0.9999999) == "0.9999999" and shown_probability(0.99999999) == "0.99999999"
    assert shown_probability(0.5) == "0.5" and shown_probability(1.0) == "1"


def test_a_threshold_that_costs_half_the_precision_warns_and_a_normal_one_does_not(caplog):
    sweep = Sweep((_point(None, 0.90, 0.90), _point(0.5, 0.88, 0.95), _point(0.9, 0.40, 0.97)), "tiny", "", 40, 900)
    with caplog.at_level(logging.WARNING, logger="hybriddeid"):
        assert sweep.pick(0.93).threshold == 0.5  # 0.88 of 0.90: a fair price
        assert sweep.pick(0.80).threshold is None  # no threshold: nothing given up
        assert not caplog.records
        assert sweep.pick(0.96).threshold == 0.9
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "threshold 0.9 keeps less than 50% of the model's precision" in warning
    assert "precision 0.4000 against 0.9000" in warning and "about 60% of the tokens" in warning
    assert "asks the model to miss" not in warning  # 0.96 is an ordinary target
    assert sweep.caution(0.9999, sweep.unset_point) is None  # reached without a threshold: no cost
    assert sweep.caution(0.9995, sweep.points[1]) is not None  # the ceiling itself warns


def test_cli_warns_at_a_costly_operating_point_and_prints_the_target_in_full(cli_setup, tmp_path, caplog, capsys):
    model, gold, plain = cli_setup
    sweep_file = tmp_path / "steep.json"
    _steep_sweep().save(sweep_file)  # no model_trained_at: any model may use it
    with caplog.at_level(logging.INFO, logger="hybriddeid"):
        assert (
            main(
                [
                    "annotate",
                    "--model",
                    str(model),
                    str(plain),
                    str(tmp_path / "a"),
                    "--recall-target",
                    "0.9999999",
                    "--sweep-file",
                    str(sweep_file),
                ]
            )
            == 0
        )
    messages = [r.getMessage() for r in caplog.records]
    assert "recall target 0.9999999: threshold 0.9995, from " + str(sweep_file) in messages
    assert not any("recall target 1:" in m or "recall target 1 " in m for m in messages)
    assert sum("about 70% of the tokens it flags are not PHI" in m for m in messages) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hybriddeid"):
        assert (
            main(
                [
                    "-q",
                    "deid",
                    "--model",
                    str(model),
                    str(plain),
                    str(tmp_path / "d"),
                    "--recall-target",
                    "0.93",
                    "--sweep-file",
                    str(sweep_file),
                ]
            )
            == 0
        )
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]  # threshold 0.5: no warning
    capsys.readouterr()
    assert (
        main(
            [
                "-q",
                "evaluate",
                str(gold),
                "--sweep",
                "--model",
                str(model),
                "--thresholds",
                "0.5",
                "--recall-target",
                "0.9999999",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "recall target 0.9999999: " in out and "recall target 1" not in out


def test_the_plot_is_a_png_and_says_what_is_missing(monkeypatch, tmp_path):
    sweep = Sweep((_point(None, 0.95, 0.80), _point(0.5, 0.93, 0.85), _point(0.9, 0.90, 0.91)), "tiny", "", 3, 9)
    sweep.plot(tmp_path / "curve.png", sweep.choose(0.9))
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"hybriddeid\[plot\]"):
        sweep.plot(tmp_path / "again.png")


@pytest.fixture(scope="module")
def cli_setup(focused, notes, tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("op")
    focused.to_disk(root / "model")
    for doc in notes:
        write_document(doc, root / "gold", "brat")
        write_document(doc.with_spans(()), root / "plain", "text")
    return root / "model", root / "gold", root / "plain"


def test_cli_evaluate_sweep(cli_setup, tmp_path, capsys):
    model, gold, _ = cli_setup
    args = ["-q", "evaluate", str(gold), "--sweep", "--model", str(model), "--thresholds", "0.5,0.99"]
    capsys.readouterr()
    assert main([*args, "--recall-target", "0.9"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[3].startswith("unset") and "recall target 0.9: threshold" in out
    assert (
        main(
            [
                *args,
                "--json",
                "--recall-target",
                "0.9",
                "--sweep-out",
                str(tmp_path / "s.json"),
                "--plot",
                str(tmp_path / "c.png"),
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert [p["threshold"] for p in data["points"]] == [None, 0.5, 0.99]
    # a target no threshold of the sweep reaches (0.99 can reach recall 1.0 on these notes: leave it out)
    assert main([*args[:-1], "0.5", "--json", "--recall-target", "1.0"]) == 0
    unreachable = json.loads(capsys.readouterr().out)
    assert unreachable["points"][-1]["binary_token"]["recall"] < 1.0
    assert unreachable["recall_target"] == 1.0 and unreachable["chosen"] is None  # said, not an error
    assert Sweep.load(tmp_path / "s.json").to_dict()["points"] == data["points"]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_evaluate_keeps_pred_dir_and_refuses_mixed_forms(cli_setup, caplog, capsys):
    model, gold, _ = cli_setup
    assert main(["-q", "evaluate", str(gold), str(gold), "--json"]) == 0  # gold against itself
    assert json.loads(capsys.readouterr().out)["scores"]["strict"]["subtype"]["all"]["micro"]["f1"] == 1.0
    assert main(["-q", "evaluate", str(gold)]) == 2 and "needs PRED_DIR" in caplog.text
    assert main(["-q", "evaluate", str(gold), str(gold), "--sweep"]) == 2 and "leave out PRED_DIR" in caplog.text
    assert (
        main(["-q", "evaluate", str(gold), str(gold), "--plot", "x.png"]) == 2 and "only go with --sweep" in caplog.text
    )
    assert main(["-q", "evaluate", str(gold), "--sweep", "--model", str(model), "--thresholds", "2"]) == 2


def test_cli_annotate_and_deid_at_an_operating_point(cli_setup, notes, focused, tmp_path, caplog):
    model, gold, plain = cli_setup
    assert main(["-q", "annotate", "--model", str(model), str(plain), str(tmp_path / "t"), "--threshold", "0.99"]) == 0
    written = {doc.name: [(s.start, s.end, s.label) for s in doc.spans] for doc in read_corpus(tmp_path / "t")}

    def linked(doc, **threshold):  # as runs give them: a name found once is marked wherever it stands alone
        return [
            (s.start, s.end, s.label)
            for s in focused.link_names([doc.with_spans(focused.predict(doc, **threshold))])[0].spans
        ]

    assert written == {doc.name: linked(doc, threshold=0.99) for doc in notes}
    assert written != {doc.name: linked(doc) for doc in notes}
    sweep_file = tmp_path / "sweep.json"
    assert (
        main(
            [
                "-q",
                "evaluate",
                str(gold),
                "--sweep",
                "--model",
                str(model),
                "--thresholds",
                "0.5,0.99",
                "--sweep-out",
                str(sweep_file),
            ]
        )
        == 0
    )
    sweep = Sweep.load(sweep_file)
    target = sweep.points[2].binary_token.recall  # reached first at 0.99
    assert sweep.threshold_for(target) == 0.99
    assert (
        main(
            [
                "-q",
                "annotate",
                "--model",
                str(model),
                str(plain),
                str(tmp_path / "r"),
                "--recall-target",
                str(target),
                "--sweep-file",
                str(sweep_file),
            ]
        )
        == 0
    )
    assert {doc.name: [(s.start, s.end, s.label) for s in doc.spans] for doc in read_corpus(tmp_path / "r")} == written
    low_sweep = tmp_path / "sweep-0.5.json"  # 0.99 can reach recall 1.0 on these notes: a sweep without it
    assert (
        main(
            [
                "-q",
                "evaluate",
                str(gold),
                "--sweep",
                "--model",
                str(model),
                "--thresholds",
                "0.5",
                "--sweep-out",
                str(low_sweep),
            ]
        )
        == 0
    )
    assert Sweep.load(low_sweep).points[-1].binary_token.recall < 1.0
    assert (
        main(
            [
                "-q",
                "annotate",
                "--model",
                str(model),
                str(plain),
                str(tmp_path / "u"),
                "--recall-target",
                "1.0",
                "--sweep-file",
                str(low_sweep),
            ]
        )
        == 2
    )
    assert "no threshold in the sweep reaches" in caplog.text and not (tmp_path / "u").exists()
    assert (
        main(
            [
                "-q",
                "annotate",
                "--model",
                "es",
                str(plain),
                str(tmp_path / "m"),
                "--recall-target",
                "0.5",
                "--sweep-file",
                str(sweep_file),
            ]
        )
        == 2
        and "run evaluate --sweep with this model" in caplog.text
    )
    assert (
        main(["-q", "annotate", "--model", str(model), str(plain), str(tmp_path / "x"), "--recall-target", "0.5"]) == 2
    )
    assert "go together" in caplog.text
    with pytest.raises(SystemExit):
        main(["-q", "annotate", str(plain), str(tmp_path / "y"), "--threshold", "0.5", "--recall-target", "0.5"])

    configured = tmp_path / "configured"  # a model whose own config sets a threshold
    Pipeline.load(model).to_disk(configured)
    config = (configured / "config.toml").read_text()
    (configured / "config.toml").write_text(config.replace("[pipeline]\n", "[pipeline]\nphi_threshold = 0.99\n", 1))
    assert main(["-q", "annotate", "--model", str(configured), str(plain), str(tmp_path / "c")]) == 0
    assert {d.name: [(s.start, s.end, s.label) for s in d.spans] for d in read_corpus(tmp_path / "c")} == written
    assert (
        main(["-q", "annotate", "--model", str(configured), str(plain), str(tmp_path / "z"), "--threshold", "0"]) == 0
    )
    assert {d.name: [(s.start, s.end, s.label) for s in d.spans] for d in read_corpus(tmp_path / "z")} == {
        doc.name: linked(doc) for doc in notes
    }

    deid = ["-q", "deid", "--model", str(model), str(plain), str(tmp_path / "d"), "--mode", "tag"]
    assert main([*deid, "--threshold", "0.99"]) == 0
    assert json.loads((tmp_path / "d" / "audit" / "run.json").read_text())["phi_threshold"] == 0.99
    audit = read_audit(tmp_path / "d" / "audit" / f"{notes[0].name}.jsonl")
    assert len(audit) == len(focused.predict(notes[0], threshold=0.99))
    assert main([*deid, "--threshold", "0.5"]) == 2  # outputs made at another threshold are not mixed
    assert "phi_threshold" in caplog.text
    assert (
        main(
            [
                "-q",
                "deid",
                "--use-annotations",
                "--language",
                "en",
                str(gold),
                str(tmp_path / "g"),
                "--threshold",
                "0.5",
            ]
        )
        == 2
    )


def test_above_focus_below_the_focused_crf_reads_every_token_below_the_threshold(focused, notes, monkeypatch):
    char, token = focused.components["char"], focused.components["token"]
    regions_read: list[tuple[int, int]] = []
    original = type(char).read

    def spy(self, doc, keep_below, regions=None, skip=()):
        regions_read.extend(regions or ())
        return original(self, doc, keep_below, regions, skip)

    monkeypatch.setattr(type(char), "read", spy)
    for doc in notes[:5]:
        regions_read.clear()
        focused.read(doc, 0.999)
        claim_from = focused._claim_from("char", "token", focused.precedence)  # None: rule > char > token
        _, sequences = token.read(doc, 0.999)
        doubtful = [
            unit
            for seq in sequences
            for i, unit in enumerate(seq.units)
            if seq.p_outside[i] < 0.999
            and not (
                claim_from is not None and any(s.start <= unit[0] < s.end and s.score >= claim_from for s in seq.spans)
            )
        ]
        assert doubtful and all(any(a <= start and end <= b for a, b in regions_read) for start, end in doubtful)


def test_sweep_under_a_phi_set_scores_what_predict_gives_there(focused, notes):
    """With --phi-set hipaa the sweep's points are evaluate(..., phi_set="hipaa") of predict's
    spans under that set, threshold applied before the set (ages under 90 never come back)."""
    sweep = run_sweep(focused, notes, (0.9,), phi_set="hipaa")
    pred = [doc.with_spans(focused.predict(doc, threshold=0.9, phi_set="hipaa")) for doc in notes]
    assert sweep.phi_set == "hipaa"
    assert sweep.points[1].binary_token == evaluate(notes, pred, phi_set="hipaa").score("binary_token")
    # an AGE span without digits (a tiny model's "year") cannot be judged and is kept, the cautious way
    ages = [
        "".join(c for c in doc.text[s.start : s.end] if c.isdigit())
        for doc in pred
        for s in doc.spans
        if s.label == "AGE"
    ]
    assert not any(int(age) < 90 for age in ages if age)
