"""Long lines are read in bounded segments (``AnalysedNote.segments``) and stitched back
(``CRFTagger._tag``): the same spans as reading them whole, bounded memory, and a configurable
per-file size limit."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import tomli_w

from hybriddeid import Pipeline
from hybriddeid.core.document import Document, Span
from hybriddeid.features import context
from hybriddeid.features.analysis import analyse
from hybriddeid.io._common import MAX_FILE_MB_ENV
from hybriddeid.pipeline.core import ConfigError, build_config, model_folder
from hybriddeid.synth import generate_corpus


def _model_with_segments(tmp_path: Path, segment_chars: int, overlap: int) -> Pipeline:
    """The bundled English model with the CRFs' segment settings changed in its saved config."""
    folder = tmp_path / f"en-{segment_chars}"
    shutil.copytree(model_folder("en"), folder)
    config = tomllib.loads((folder / "config.toml").read_text(encoding="utf-8"))
    for name in ("char", "token"):
        config[name].update(segment_chars=segment_chars, segment_overlap=overlap)
    (folder / "config.toml").write_text(tomli_w.dumps(config), encoding="utf-8")
    return Pipeline.load(folder)


@pytest.fixture(scope="module", autouse=True)
def one_long_line():
    """These tests read one long line in segments: the header blocks on it are not read as lines of
    their own (``features.context.layout_lines``, which cuts such a line before its field labels)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(context, "FIELD_LINE_MIN_LABELS", 10**9)
        yield


@pytest.fixture(scope="module")
def long_line() -> Document:
    """About 30,000 characters of generated English notes joined on one line."""
    docs = list(generate_corpus(30, 2, "test"))
    text = " ".join(" ".join(doc.text.split()) for doc in docs)
    assert len(text) > 25_000
    return Document("long", text)


@pytest.fixture(scope="module")
def readings(tmp_path_factory: pytest.TempPathFactory, long_line: Document) -> dict[str, list]:
    """The long line's spans read whole and in segments of 1,000 characters, by ``predict`` and
    at a P(O) threshold (``Pipeline.read``)."""
    tmp = tmp_path_factory.mktemp("models")
    whole = _model_with_segments(tmp, 10**9, 400)
    cut = _model_with_segments(tmp, 1000, 200)
    return {
        "whole": whole.predict(long_line),
        "cut": cut.predict(long_line),
        "whole@0.5": whole.predict(long_line, threshold=0.5),
        "cut@0.5": cut.predict(long_line, threshold=0.5),
    }


def _keys(spans: list) -> list[tuple[int, int, str, str]]:
    return [(span.start, span.end, span.label, span.source) for span in spans]


@pytest.mark.parametrize("suffix", ["", "@0.5"])
def test_segments_give_the_spans_of_the_whole_line(readings: dict[str, list], suffix: str) -> None:
    whole, cut = readings["whole" + suffix], readings["cut" + suffix]
    assert len(whole) > 100
    assert _keys(cut) == _keys(whole)
    assert max(abs(a.score - b.score) for a, b in zip(cut, whole)) < 1e-6


def test_a_span_crossing_a_cut_is_found_whole(readings: dict[str, list], long_line: Document) -> None:
    cuts = [segment.core[1] for segment in analyse(long_line, "en").segments(1000, 200) if segment.core]
    assert len(cuts) > 20
    crossing = [span for span in readings["whole"] if any(span.start < cut < span.end for cut in cuts)]
    assert crossing, "no span crosses a cut: the test note no longer tests stitching"
    found = set(_keys(readings["cut"]))
    assert all(key in found for key in _keys(crossing))


def test_segments_bound_and_partition_a_long_line() -> None:
    text = "Short line here.\n" + "word " * 700 + "\nLab: " + "7" * 12_000 + " end\n"
    note = analyse(Document("n", text), "en")
    segments = list(note.segments(1000, 200))
    assert segments[0].core is None and segments[0].line is note.lines[0]  # short lines: read as before
    for line in note.lines[1:]:
        start, end = line.context.start, line.context.end
        parts = [s for s in segments if s.core and start <= s.core[0] < end]
        assert parts[0].core[0] == start and parts[-1].core[1] == end
        assert all(a.core[1] == b.core[0] for a, b in zip(parts, parts[1:]))  # cores partition the line
        for part in parts:
            seg = part.line.context
            assert seg.end - seg.start <= 1000 and seg.features == line.context.features
            assert seg.start <= part.core[0] - 100 or part.core[0] == start  # context before the core
            assert part.core[1] + 100 <= seg.end or part.core[1] == end  # and after it
            assert all(seg.start <= tok.start < tok.end <= seg.end for tok in part.line.tokens)
    words_line = note.lines[1].context
    words = [s for s in segments if s.core and words_line.start <= s.core[0] < words_line.end]
    assert len(words) > 2 and all(text[s.core[1] - 1] == " " for s in words[:-1])  # cut between words
    digits = [s for s in segments if s.core and text[s.core[1] - 1 : s.core[1] + 1] == "77"]
    assert digits  # a run without breaks is cut inside it


def test_segment_settings_are_checked_and_default_for_old_models(tmp_path: Path) -> None:
    config = build_config({})
    assert config["char"]["segment_chars"] == config["token"]["segment_chars"] == 5000
    with pytest.raises(ConfigError, match="segment_chars"):
        build_config({"char": {"segment_chars": 1000, "segment_overlap": 400}})
    with pytest.raises(ConfigError, match="segment_chars"):
        build_config({"token": {"segment_chars": 50}})
    # a model saved before the setting existed (the bundled Spanish one, with the setting taken out) gets the default
    old = tmp_path / "old-model"
    shutil.copytree(model_folder("es"), old)
    saved = tomllib.loads((old / "config.toml").read_text(encoding="utf-8"))
    for section in ("char", "token"):
        saved[section].pop("segment_chars", None)
        saved[section].pop("segment_overlap", None)
    (old / "config.toml").write_text(tomli_w.dumps(saved), encoding="utf-8")
    loaded = Pipeline.load(old)
    assert loaded.components["char"].segment_chars == loaded.components["token"].segment_chars == 5000


def test_a_200k_digit_run_is_deidentified_in_bounded_memory(tmp_path: Path) -> None:
    in_dir, out_dir = tmp_path / "in", tmp_path / "out"
    in_dir.mkdir()
    run = "".join(str(i * 7919 % 10) for i in range(200_000))
    (in_dir / "lab.txt").write_text(f"Seen by Dr. Smith.\nResult: {run}\nCall 555-123-4567.\n", encoding="utf-8")
    child = textwrap.dedent("""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))
        from hybriddeid.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    done = subprocess.run(
        [sys.executable, "-c", child, "-q", "deid", str(in_dir), str(out_dir), "--model", "en"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )  # the installed package
    assert done.returncode == 0, done.stderr[-2000:]
    out = (out_dir / "lab.txt").read_text(encoding="utf-8")
    assert out.count("\n") == 3 and "Smith" not in out


def test_max_file_mb_sets_the_readers_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hybriddeid.cli import main

    monkeypatch.delenv(MAX_FILE_MB_ENV, raising=False)  # main sets it; restored after the test
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    (in_dir / "a.txt").write_text("Seen by Dr. Smith. " * 200, encoding="utf-8")  # 3,800 bytes
    assert main(["-q", "deid", str(in_dir), str(tmp_path / "small"), "--max-file-mb", "0.001"]) != 0
    assert not (tmp_path / "small" / "a.txt").exists()
    assert main(["-q", "deid", str(in_dir), str(tmp_path / "big"), "--max-file-mb", "0.01"]) == 0
    assert (tmp_path / "big" / "a.txt").exists()
    assert main(["-q", "deid", str(in_dir), str(tmp_path / "zero"), "--max-file-mb", "0"]) == 2


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_long_audit_is_written_line_by_line_with_every_row(tmp_path: Path, fmt: str) -> None:
    from dataclasses import asdict

    from hybriddeid.io import atomic_write_text
    from hybriddeid.surrogates import DeidOptions, deidentify_document
    from hybriddeid.surrogates.audit import audit_lines, read_audit, read_audit_run, render_audit

    note = "Seen by Dr. Smith on 03/12/2020, call 555-123-4567. " * 1000
    spans = [
        Span(m.start(), m.end(), label, "rule")
        for label, pattern in (("DOCTOR", r"Smith"), ("DATE", r"03/12/2020"))
        for m in re.finditer(pattern, note)
    ]
    result = deidentify_document(Document("n", note, tuple(spans)), DeidOptions(mode="tag"))
    assert len(result.replacements) == 2000
    path = tmp_path / f"n.{fmt}"
    atomic_write_text(path, audit_lines("n", result.replacements, fmt, {"settings": "x"}))  # chunks, not one string
    assert path.read_text(encoding="utf-8") == render_audit("n", result.replacements, fmt, {"settings": "x"})
    assert path.stat().st_size > 65536  # the CSV writer's buffer was emptied along the way
    assert read_audit_run(path) == {"settings": "x"}
    rows = read_audit(path)
    assert [{key: value for key, value in row.items() if key != "note"} for row in rows] == [
        asdict(rep) for rep in result.replacements
    ]  # every field, as the dataclass holds it


def test_jsonl_audit_rows_are_what_json_dumps_writes() -> None:
    """The audit writes its rows without a dictionary and an encoder per row, byte for byte as
    ``json.dumps(..., ensure_ascii=False)`` of the row would: quotes, controls, non-ASCII and lone
    surrogates in names and replacements, scores of every float kind, integer scores."""
    import json

    from hybriddeid.io._common import record_name
    from hybriddeid.surrogates.audit import audit_lines
    from hybriddeid.surrogates.deid import Replacement

    texts = ["[**NAME**]", 'say "x"\\ \n\t\x00\x1f\x7f', "caf\u00e9 \u6f22 \u2028", "", "\udce9"]
    scores = [1.0, 0.97312345678901, 1e-9, 1e300, -0.0, float("nan"), float("inf"), -float("inf"), 1, 0.1 + 0.2]
    replacements = [
        Replacement(i, i + 1, 2 * i, 2 * i + 3, "NAME", "NAME", "person", method, "char", score, text)
        for i, (text, score, method) in enumerate(
            (t, s, m) for t in texts for s in scores for m in ("tag", "m\u00e4sk")
        )
    ]
    replacements.append(Replacement(9, 10, 9, 10, "NAME", "NAME", "person", "tag", "char", 0.5, None))  # type: ignore[arg-type]  # no text, on purpose
    for note in ("n", 'caf\u00e9 "7".txt', "a\\b\udce9"):
        lines = list(audit_lines(note, replacements, "jsonl", {"settings": "x"}))
        name = record_name(note)  # a file name's undecodable byte is written \\xNN, as in every record
        assert lines[1:] == [
            json.dumps({"note": name, **rep.to_dict()}, ensure_ascii=False) + "\n" for rep in replacements
        ]
        assert len(lines) == 2 + len(texts) * len(scores) * 2


def test_an_output_is_checked_against_its_audit_row_by_row() -> None:
    from hybriddeid.surrogates.deid import apply_replacements, matches_replacements

    text = "Seen by Dr. Smith on 03/12/2020 in Boston."
    rows = [
        {"start": 12, "end": 17, "replacement": "[NAME]"},
        {"start": 21, "end": 31, "replacement": "[DATE]"},
        {"start": 35, "end": 41, "replacement": "[LOCATION]"},
    ]
    output = apply_replacements(text, rows)
    assert output == "Seen by Dr. [NAME] on [DATE] in [LOCATION]."
    assert matches_replacements(text, output, iter(rows))  # rows as an audit gives them, one at a time
    assert not matches_replacements(text, output + " ", iter(rows))
    assert not matches_replacements(text, output.replace("[DATE]", "[DAT3]"), iter(rows))
    assert not matches_replacements(text, output, iter(rows[:2]))
    assert not matches_replacements(text, output, iter([rows[1], rows[0], rows[2]]))  # out of order: redone
    assert matches_replacements(text, text, iter([]))
