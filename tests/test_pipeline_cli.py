"""Pipeline fit/predict/save/load and the CLI (train, annotate, evaluate) on a tiny corpus."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from hybriddeid import Pipeline
from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.io import read_corpus, write_document
from hybriddeid.pipeline.core import ConfigError, _name_and_place_labels, _person_labels, build_config

NAMES = ["Ana Ruiz", "Pedro Gil", "Marta Sanz", "Luis Vega", "Eva Mora", "Juan Ortiz", "Rosa Prieto", "Hugo Lara"]
FAST = {
    "pipeline": {"language": "es"},
    "char": {"max_iterations": 30},
    "token": {"max_iterations": 30},
}


def make_corpus() -> list[Document]:
    docs = []
    for i, name in enumerate(NAMES):
        date = f"{i + 10}/0{i + 1}/2019"
        nhc = f"{4417920 + 37 * i}"
        text = f"Nombre: {name}.\nNHC: {nhc}.\nFecha de ingreso: {date}.\nPaciente con fiebre y tos.\n"
        spans = []
        for value, label in ((name, "NOMBRE_SUJETO_ASISTENCIA"), (nhc, "ID_SUJETO_ASISTENCIA"), (date, "FECHAS")):
            start = text.index(value)
            spans.append(Span(start, start + len(value), label))
        docs.append(Document(f"note{i}", text, tuple(spans)))
    return docs


@pytest.fixture(scope="module")
def corpus_dirs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("corpus")
    docs = make_corpus()
    for doc in docs[:6]:
        write_document(doc, root / "train", "brat")
    for doc in docs[6:]:
        write_document(doc, root / "dev", "brat")
    return root / "train", root / "dev"


@pytest.fixture(scope="module")
def trained(corpus_dirs) -> Pipeline:
    return Pipeline(FAST).fit(read_corpus(corpus_dirs[0]), n_jobs=1)


def test_pipeline_predicts_merged_spans_with_sources(trained):
    doc = make_corpus()[7]
    spans = trained.predict(doc)
    assert {(s.start, s.end, s.label) for s in spans} == {(s.start, s.end, s.label) for s in doc.spans}
    assert {s.source for s in spans} <= {"rule", "char", "token"}
    by_source = trained.predict_by_source(doc)
    assert set(by_source) == {"rule", "char", "token"}
    assert trained.predict(doc.text) == spans  # a plain string works too


def test_pipeline_round_trips_through_disk_without_pickles(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    files = {p.suffix for p in (tmp_path / "model").rglob("*") if p.is_file()}
    assert ".pkl" not in files and ".pickle" not in files
    assert (tmp_path / "model" / "config.toml").is_file()
    reloaded = Pipeline.load(tmp_path / "model")
    doc = make_corpus()[6]
    assert reloaded.predict(doc) == trained.predict(doc)
    assert reloaded.config == trained.config


def test_load_refuses_a_model_with_a_missing_component(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    shutil.rmtree(tmp_path / "model" / "char")
    with pytest.raises(FileNotFoundError, match="char"):
        Pipeline.load(tmp_path / "model")


def test_load_refuses_an_unknown_feature_recipe(trained, tmp_path):
    trained.to_disk(tmp_path / "model")
    config = (tmp_path / "model" / "config.toml").read_text()
    (tmp_path / "model" / "config.toml").write_text(config.replace('"words"', '"no_such_feature"', 1))
    with pytest.raises(ConfigError, match="no_such_feature"):
        Pipeline.load(tmp_path / "model")


def test_config_rejects_unknown_keys_and_components():
    with pytest.raises(ConfigError, match="unknown key"):
        build_config({"token": {"windw": 3}})
    with pytest.raises(ConfigError, match="components"):
        build_config({"pipeline": {"components": ["crf9000"]}})
    for bad in (1.5, -0.1, "0.3", True):
        with pytest.raises(ConfigError, match="agreement_score"):
            build_config({"pipeline": {"agreement_score": bad}})
    with pytest.raises(ConfigError, match="agreement_same_kind must be true or false"):
        build_config({"pipeline": {"agreement_same_kind": "yes"}})


def test_agreement_score_is_saved_with_the_model_and_unset_is_left_out(trained, tmp_path):
    trained.to_disk(tmp_path / "plain")
    assert "agreement_score" not in (tmp_path / "plain" / "config.toml").read_text()
    trained.config["pipeline"]["agreement_score"] = 0.3  # the fixture is shared: set back below
    try:
        trained.to_disk(tmp_path / "agreeing")
    finally:
        trained.config["pipeline"]["agreement_score"] = None
    assert Pipeline.load(tmp_path / "agreeing").config["pipeline"]["agreement_score"] == 0.3


def test_combine_keeps_what_both_crfs_found_below_their_floors_only_with_agreement(trained):
    """Pipeline.combine hands the note's text and the setting to the filter: pieces of the character CRF
    tiling the token CRF's low span keep it; without the setting the floors alone decide."""
    doc = Document("n", "Seen with Nadia Robles Pardo today.")
    by_source = {
        "rule": [],
        "token": [Span(10, 27, "PATIENT", "token", 0.45)],
        "char": [Span(10, 15, "PATIENT", "char", 0.6), Span(16, 27, "DOCTOR", "char", 0.5)],
    }
    assert trained.combine(doc, by_source) == []
    trained.config["pipeline"]["agreement_score"] = 0.3  # the fixture is shared: set back below
    try:
        kept = trained.combine(doc, by_source)
    finally:
        trained.config["pipeline"]["agreement_score"] = None
    assert [(span.start, span.end, span.source) for span in kept] == [(10, 27, "token")]


def test_combine_asks_the_crfs_to_agree_on_the_kind_with_agreement_same_kind(trained):
    """With ``agreement_same_kind`` the pieces must be of the low span's kind (by the surrogate kinds):
    a patient and a doctor are both people, a hospital is not."""
    doc = Document("n", "Seen with Nadia Robles Pardo today.")
    token = Span(10, 27, "PATIENT", "token", 0.45)
    settings = trained.config["pipeline"]
    settings["agreement_score"], settings["agreement_same_kind"] = 0.3, True  # the fixture is shared: set back below
    try:
        kept = {
            other: trained.combine(
                doc,
                {
                    "rule": [],
                    "token": [token],
                    "char": [Span(10, 15, "PATIENT", "char", 0.6), Span(16, 27, other, "char", 0.5)],
                },
            )
            for other in ("DOCTOR", "HOSPITAL")
        }
    finally:
        settings["agreement_score"], settings["agreement_same_kind"] = None, False
    assert [(span.start, span.end) for span in kept["DOCTOR"]] == [(10, 27)]
    assert kept["HOSPITAL"] == []


def test_combine_widens_a_person_over_a_given_name_the_crfs_left_out(trained):
    """The surname found alone takes the given name before it (merge.given_names_before, with the
    language's first names less its ordinary words): "Nadia" would stay in the output."""
    doc = Document("n", "Acude con Nadia Whitcombe hoy.")
    by_source = {"rule": [], "token": [Span(16, 25, "NOMBRE_SUJETO_ASISTENCIA", "token", 0.9)], "char": []}
    assert [(span.start, span.end) for span in trained.combine(doc, by_source)] == [(10, 25)]


def test_relatives_are_widened_to_their_whole_names_as_people_are():
    """MEDDOCAN's relatives' label holds their names too: a span cut inside a hyphenated given name is
    widened (merge.whole_name_words) as a patient's is; a profession is not."""
    labels = ("FAMILIARES_SUJETO_ASISTENCIA", "NOMBRE_SUJETO_ASISTENCIA", "PROFESION", "CALLE")
    assert _name_and_place_labels(labels) == {"FAMILIARES_SUJETO_ASISTENCIA", "NOMBRE_SUJETO_ASISTENCIA", "CALLE"}
    assert _person_labels(labels) == {"FAMILIARES_SUJETO_ASISTENCIA", "NOMBRE_SUJETO_ASISTENCIA"}


def test_focus_runs_the_char_crf_only_where_the_token_crf_is_unsure(trained):
    doc = make_corpus()[7]
    char, token = trained.components["char"], trained.components["token"]
    assert char.predict(doc, regions=[(0, len(doc.text))]) == char.predict(doc)
    assert char.predict(doc, regions=[]) == []
    focused = Pipeline({**trained.config, "pipeline": {**trained.config["pipeline"], "focus": {"char": "token"}}})
    focused.components = trained.components
    below, margin = focused.config["pipeline"]["focus_below"], focused.config["pipeline"]["focus_margin"]
    spans, regions = token.predict_with_focus(doc, below, margin)
    assert spans == token.predict(doc)
    assert all(any(start <= s.start and s.end <= end for start, end in regions) for s in spans)
    by_source = focused.predict_by_source(doc)
    assert by_source["token"] == spans and by_source["rule"] == trained.components["rule"].predict(doc)
    assert by_source["char"] == char.predict(doc, regions=regions)
    assert all(any(start <= s.start and s.end <= end for start, end in regions) for s in by_source["char"])
    # ranked above the char CRF, the token CRF claims its own confident spans: the char CRF,
    # whose finds there the merger would drop, does not read them
    token_first = ["rule", "token", "char"]
    confident = [s for s in spans if s.score >= trained.config["pipeline"]["min_score"]["token"]]
    assert confident
    floor = trained.config["pipeline"]["min_score"]["token"]
    _, seeds = token.predict_with_focus(doc, below, 0, floor)  # no margin: just the unsure, unclaimed tokens
    assert not any(start < s.end and s.start < end for s in confident for start, end in seeds)
    _, claimed_regions = token.predict_with_focus(doc, below, margin, floor)
    assert focused.predict_by_source(doc, token_first)["char"] == char.predict(doc, regions=claimed_regions)
    assert focused.predict(doc, token_first) == focused.combine(
        doc, focused.predict_by_source(doc, token_first), token_first
    )
    # a focuser sure about everything leaves the character CRF nothing to read
    blind = Pipeline(
        {**focused.config, "pipeline": {**focused.config["pipeline"], "focus_below": 1e-12, "focus_margin": 0}}
    )
    blind.components = trained.components
    within_token_spans = [
        any(t.start <= s.start and s.end <= t.end for t in spans) for s in blind.predict_by_source(doc)["char"]
    ]
    assert within_token_spans and all(within_token_spans)


def test_config_rejects_a_focus_that_cannot_work():
    for focus in ({"token": "char"}, {"char": "rule"}, {"char": "char"}, {"char": "nope"}):
        with pytest.raises(ConfigError, match="focus"):
            build_config({"pipeline": {"focus": focus}})
    with pytest.raises(ConfigError, match="focus"):
        build_config({"pipeline": {"components": ["rule", "char"], "focus": {"char": "token"}}})
    with pytest.raises(ConfigError, match="focus_below"):
        build_config({"pipeline": {"focus": {"char": "token"}, "focus_below": 0.0}})
    assert build_config({"pipeline": {"focus": {"char": "token"}}})["pipeline"]["focus"] == {"char": "token"}


def test_flattened_copies_are_a_stable_share_of_the_notes_with_line_breaks():
    from hybriddeid.pipeline.core import flattened_copies

    notes = [
        Document(f"note-{i}", f"Seen by\nDr. Ames on 3/{i % 28 + 1}/2020.\r\nPlan: rest.", (Span(12, 16, "DOCTOR"),))
        for i in range(400)
    ] + [Document("one-line", "Dr. Ames", (Span(4, 8, "DOCTOR"),))]
    assert flattened_copies(notes, 0.0) == []
    assert len(flattened_copies(notes, 1.0)) == 400  # the one-line note has nothing to flatten
    copies = flattened_copies(notes, 0.15)
    assert 30 <= len(copies) <= 90
    assert [c.name for c in flattened_copies(notes[::-1], 0.15)] == [c.name for c in copies][::-1]  # by name, not order
    for copy in copies:
        original = next(n for n in notes if n.name + "#flat" == copy.name)
        assert "\n" not in copy.text and "\r" not in copy.text and len(copy.text) == len(original.text)
        assert copy.spans == original.spans and copy.span_text(copy.spans[0]) == "Ames"
    with pytest.raises(ConfigError, match="flattened_copies"):
        build_config({"pipeline": {"flattened_copies": 1.5}})


def test_case_copies_are_stable_shares_in_each_case_with_the_spans_kept():
    from hybriddeid.pipeline.core import case_copies

    notes = [Document(f"note-{i}", "Seen by Dr. Ames on 3/4/2020.", (Span(12, 16, "DOCTOR"),)) for i in range(400)]
    assert case_copies(notes, {}) == [] and case_copies(notes, {"upper": 0.0}) == []
    copies = case_copies(notes, {"upper": 0.2, "lower": 0.1})
    upper = [c for c in copies if c.name.endswith("#upper")]
    lower = [c for c in copies if c.name.endswith("#lower")]
    assert 40 <= len(upper) <= 120 and 15 <= len(lower) <= 70
    assert {c.span_text(c.spans[0]) for c in upper} == {"AMES"} and {c.span_text(c.spans[0]) for c in lower} == {"ames"}
    assert {c.name.split("#")[0] for c in upper} != {c.name.split("#")[0] for c in lower}  # other notes per case
    assert [c.name for c in case_copies(notes[::-1], {"upper": 0.2})] == [c.name for c in upper][::-1]
    assert (
        case_copies([Document("ss", "Straße Ames", (Span(7, 11, "DOCTOR"),))], {"upper": 1.0}) == []
    )  # "SS" moves offsets
    with pytest.raises(ConfigError, match="case_copies"):
        build_config({"pipeline": {"case_copies": {"upper": 1.5}}})
    with pytest.raises(ConfigError, match="case_copies"):
        build_config({"pipeline": {"case_copies": {"sideways": 0.5}}})


def test_precedence_ablation_changes_the_winner(trained):
    doc = make_corpus()[7]
    only_token = trained.predict(doc, precedence=["token", "char", "rule"])
    assert all(s.source in {"token", "char", "rule"} for s in only_token)


def test_cli_train_annotate_evaluate(corpus_dirs, tmp_path, capsys):
    train_dir, dev_dir = corpus_dirs
    config = tmp_path / "fast.toml"
    config.write_text('[pipeline]\nlanguage = "es"\n[char]\nmax_iterations = 30\n[token]\nmax_iterations = 30\n')
    model = tmp_path / "model"
    assert (
        main(
            [
                "-q",
                "train",
                "--train",
                str(train_dir),
                "--dev",
                str(dev_dir),
                "--config",
                str(config),
                "--out",
                str(model),
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    meta = json.loads((model / "meta.json").read_text())
    assert meta["training_corpus"]["documents"] == 6 and "dev_metrics" in meta

    # Annotate a folder of plain notes: one output per input, named after it.
    plain = tmp_path / "plain"
    for doc in make_corpus()[6:]:
        write_document(doc.with_spans(()), plain, "text")
    out = tmp_path / "out"
    assert main(["-q", "annotate", "--model", str(model), str(plain), str(out), "--format", "brat"]) == 0
    assert sorted(p.name for p in out.glob("*.ann")) == ["note6.ann", "note7.ann"]

    capsys.readouterr()
    assert main(["evaluate", str(dev_dir), str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scores"]["strict"]["subtype"]["all"]["micro"]["f1"] == 1.0

    # A rerun resumes (skips finished files); a bad file is reported and the others still go.
    (plain / "broken.txt").write_bytes(b"\x00\x01binary")
    (plain / "note8.txt").write_text("Nombre: Rosa Prieto.\n", encoding="utf-8")
    assert main(["-q", "annotate", "--model", str(model), str(plain), str(out)]) == 1
    assert (out / "note8.ann").is_file() and not (out / "broken.ann").exists()


def test_cli_reports_a_missing_model_without_traceback(tmp_path, caplog):
    assert main(["-q", "annotate", "--model", str(tmp_path / "nope"), str(tmp_path), str(tmp_path / "o")]) == 2
    assert "not a hybriddeid model" in caplog.text


def test_annotate_refuses_to_write_into_the_input_folder(corpus_dirs, trained, tmp_path):
    model = tmp_path / "model"
    trained.to_disk(model)
    assert main(["-q", "annotate", "--model", str(model), str(corpus_dirs[1]), str(corpus_dirs[1])]) == 2


def test_console_script_is_installed():
    exe = shutil.which("hybriddeid")
    assert exe is not None
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("hybriddeid ")


def test_a_reader_that_leaves_early_ends_the_run_quietly(tmp_path):
    """`hybriddeid evaluate ... | head`: stdout closed before the report is written gives exit 141 and
    nothing on stderr (no BrokenPipeError traceback, none at the interpreter's exit either)."""
    import sys

    gold = tmp_path / "gold"
    write_document(Document("n1", "Seen by Dr. Ames today.", (Span(12, 16, "DOCTOR"),)), gold, "brat")
    run = subprocess.Popen(
        [sys.executable, "-m", "hybriddeid.cli", "evaluate", str(gold), str(gold)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )  # the installed package
    run.stdout.close()  # the reader is gone before a line is written
    stderr = run.stderr.read().decode()
    assert run.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr


def test_annotate_imports_nothing_it_does_not_use(tmp_path):
    """A whole-process `annotate` pays every import (issue 45): the surrogate generator's Faker, the progress
    bar's tqdm, numpy.random and numpy.ma are for other commands, and torch only for neural models."""
    import sys

    examples = Path(__file__).resolve().parents[1] / "examples" / "notes"
    code = (
        "import sys\n"
        "from hybriddeid.cli import main\n"
        f"code = main(['annotate', {str(examples)!r}, {str(tmp_path / 'out')!r}])\n"
        "print(code, sorted(m for m in ('faker', 'tqdm', 'numpy.random', 'numpy.ma', 'torch') if m in sys.modules))\n"
    )
    # run outside the checkout: "-c" puts the working folder first on sys.path, where a clean clone's source tree
    # (without the resources an install copies in) would stand in for the installed package
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True, cwd=tmp_path
    )
    assert result.stdout.split("\n")[-2] == "0 []", result.stdout + result.stderr
    assert len(list((tmp_path / "out").glob("*.ann"))) == len(list(examples.glob("*.txt")))
