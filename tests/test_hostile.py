"""Hostile inputs: each kind of bad input is reported by file name with a clear message, never with note
text; nothing is half-written (no output for a failed note, no temporary file left); the good notes
beside it are done.

Every note carries a made-up name (``MARKER``) that must never reach a log record, stdout or stderr.
Runs use the CLI in this process with the bundled English model (it loads in well under a second);
workers are forked from this process, so monkeypatches reach them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.io import read_document, write_document

MARKER = "Quorvendale Zibbinshaw"  # a name no log may ever hold
GOOD = f"Patient {MARKER} was seen on 03/14/2024 by Dr. Lee.\nMRN 4417920.\n"
TEMP = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")


def write(folder: Path, files: dict[str, bytes | str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return folder


def brat(text: str, ann: str = "") -> dict[str, str]:
    return {"txt": text, "ann": ann}


def xml(text: str, tags: str = "") -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<deIdi2b2><TEXT><![CDATA[{text}]]></TEXT>'
        f"<TAGS>{tags}</TAGS></deIdi2b2>\n"
    )


class Run:
    """One CLI run: its exit code, error records and everything printed or logged."""

    def __init__(self, args: list[str], capsys, caplog) -> None:
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        started = time.perf_counter()
        self.code = main(["-q", *args])
        self.seconds = time.perf_counter() - started
        captured = capsys.readouterr()
        self.errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        self.warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        self.streams = captured.out + captured.err + caplog.text + "\n".join(self.errors + self.warnings)

    def clean(self) -> None:
        """No note text anywhere."""
        for secret in (MARKER, *MARKER.split()):
            assert secret not in self.streams


def no_temp_files(folder: Path) -> None:
    left = [p for p in folder.rglob("*") if TEMP.fullmatch(p.name)] if folder.exists() else []
    assert left == []


def annotate(in_dir: Path, out_dir: Path, capsys, caplog, *extra: str) -> Run:
    return Run(["annotate", "--model", "en", str(in_dir), str(out_dir), *extra], capsys, caplog)


def deid_annotations(in_dir: Path, out_dir: Path, capsys, caplog, *extra: str) -> Run:
    return Run(
        ["deid", "--use-annotations", "--language", "en", "--mode", "tag", str(in_dir), str(out_dir), *extra],
        capsys,
        caplog,
    )


def failed_alone(run: Run, out: Path, bad: str, problem: str, good: str = "good") -> None:
    """``bad`` failed with ``problem`` named by file; the good note was done; nothing else is left."""
    assert run.code == 1, run.errors
    assert any(error.startswith(f"{bad}: ") and problem in error for error in run.errors), run.errors
    assert len(run.errors) == 1, run.errors
    assert any(p.stem == good for p in out.iterdir())
    assert not any(p.stem == Path(bad).stem for p in out.iterdir() if p.is_file())
    no_temp_files(out)
    run.clean()


# -- files that cannot be read as notes -------------------------------------------------------------
UNREADABLE = {
    "empty file": ({"bad.txt": b""}, "bad.txt", "file is empty"),
    "binary file": ({"bad.txt": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + MARKER.encode()}, "bad.txt", "binary file"),
    "invalid UTF-8": ({"bad.txt": f"{MARKER} caf\xe9".encode("latin-1")}, "bad.txt", "not valid UTF-8 (byte offset"),
    "UTF-16": ({"bad.txt": MARKER.encode("utf-16")}, "bad.txt", "UTF-16"),
    "NUL inside text": ({"bad.txt": f"{MARKER}\x00 seen".encode()}, "bad.txt", "NUL byte"),
}


@pytest.mark.parametrize("kind", list(UNREADABLE))
def test_unreadable_text_files(kind, tmp_path, capsys, caplog):
    files, bad, problem = UNREADABLE[kind]
    notes = write(tmp_path / "in", {"good.txt": GOOD, **files})
    run = annotate(notes, tmp_path / "out", capsys, caplog)
    failed_alone(run, tmp_path / "out", bad, problem)
    if kind == "invalid UTF-8":
        assert "--encoding" in run.errors[0]  # the way out is named


XML_BAD = {
    "malformed XML": (f"<deIdi2b2><TEXT>{MARKER}</TEXT><TAGS></deIdi2b2>", "malformed XML at line 1"),
    "wrong root": (f"<deIdi2b2><NOTE>{MARKER}</NOTE></deIdi2b2><!-- <TEXT> -->", "no <TEXT> element"),
    "other encoding declared": (
        f'<?xml version="1.0" encoding="windows-1252"?><r><TEXT>{MARKER}</TEXT></r>',
        "declares encoding 'windows-1252'",
    ),
}


@pytest.mark.parametrize("kind", list(XML_BAD))
def test_bad_xml(kind, tmp_path, capsys, caplog):
    content, problem = XML_BAD[kind]
    notes = write(tmp_path / "in", {"good.xml": xml(GOOD), "zz_bad.xml": content})  # good.xml is sniffed
    run = annotate(notes, tmp_path / "out", capsys, caplog, "--format", "i2b2")
    failed_alone(run, tmp_path / "out", "zz_bad.xml", problem)


# -- annotations: annotate reads the text alone, deid --use-annotations needs them ---------------------
BAD_ANNOTATIONS = {
    "BRAT malformed line": ("brat", brat(GOOD, f"T1\tNAME 8\t{MARKER}\n"), "line 1: malformed"),
    "BRAT span out of range": ("brat", brat(GOOD, f"T1\tNAME 8 9999\t{MARKER}\n"), "out of range"),
    "i2b2 TAG out of range": (
        "i2b2",
        xml(GOOD, f'<NAME id="P0" start="8" end="9999" text="{MARKER}" TYPE="PATIENT"/>'),
        "out of range",
    ),
    "i2b2 TAG offsets not numbers": (
        "i2b2",
        xml(GOOD, '<NAME id="P0" start="x" end="9" TYPE="PATIENT"/>'),
        "not non-negative integers",
    ),
}


def write_note(folder: Path, stem: str, fmt: str, content) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "brat":
        (folder / f"{stem}.txt").write_text(content["txt"], encoding="utf-8")
        (folder / f"{stem}.ann").write_text(content["ann"], encoding="utf-8")
    else:
        (folder / f"{stem}.xml").write_text(content, encoding="utf-8")


def good_note(folder: Path, fmt: str) -> None:
    start = GOOD.index(MARKER)
    doc = Document("good", GOOD, (Span(start, start + len(MARKER), "PATIENT"),))
    write_document(doc, folder, fmt)


@pytest.mark.parametrize("kind", list(BAD_ANNOTATIONS))
def test_annotate_ignores_bad_annotations_with_a_warning(kind, tmp_path, capsys, caplog):
    fmt, content, problem = BAD_ANNOTATIONS[kind]
    notes = tmp_path / "in"
    good_note(notes, fmt)
    write_note(notes, "bad", fmt, content)
    out = tmp_path / "out"
    run = annotate(notes, out, capsys, caplog, "--format", "jsonl")
    assert run.code == 0, run.errors
    assert [w for w in run.warnings if problem in w and "annotations ignored" in w and "bad." in w]
    (doc,) = read_document(out / "bad.jsonl")
    assert doc.text == GOOD and any(doc.span_text(s) == MARKER for s in doc.spans)  # annotated from its text
    no_temp_files(out)
    run.clean()


@pytest.mark.parametrize("kind", list(BAD_ANNOTATIONS))
def test_deid_with_annotations_refuses_bad_annotations(kind, tmp_path, capsys, caplog):
    fmt, content, problem = BAD_ANNOTATIONS[kind]
    notes = tmp_path / "in"
    good_note(notes, fmt)
    write_note(notes, "bad", fmt, content)
    out = tmp_path / "out"
    run = deid_annotations(notes, out, capsys, caplog)
    bad = "bad.ann" if fmt == "brat" else "bad.xml"
    failed_alone(run, out, bad, problem)
    assert not (out / "audit" / "bad.jsonl").exists()


def test_overlapping_brat_spans_keep_the_longer_under_annotate_and_deid(tmp_path, capsys, caplog):
    start = GOOD.index(MARKER)
    ann = f"T1\tPATIENT {start} {start + len(MARKER)}\t{MARKER}\nT2\tPATIENT {start} {start + 11}\t{MARKER[:11]}\n"
    notes = tmp_path / "in"
    good_note(notes, "brat")
    write_note(notes, "over", "brat", brat(GOOD, ann))
    run = annotate(notes, tmp_path / "ann", capsys, caplog)
    assert run.code == 0 and (tmp_path / "ann" / "over.ann").is_file()
    run.clean()
    run = deid_annotations(notes, tmp_path / "deid", capsys, caplog)
    assert run.code == 0, run.errors
    assert [w for w in run.warnings if "overlap" in w and "over.ann" in w]
    text = (tmp_path / "deid" / "over.txt").read_text(encoding="utf-8")
    assert MARKER[:5] not in text and "[**NAME**]" in text
    run.clean()


def test_ann_without_txt(tmp_path, capsys, caplog):
    notes = tmp_path / "in"
    good_note(notes, "brat")
    (notes / "lonely.ann").write_text(f"T1\tPATIENT 0 5\t{MARKER[:5]}\n", encoding="utf-8")
    for run, out in (
        (annotate(notes, tmp_path / "a", capsys, caplog), tmp_path / "a"),
        (deid_annotations(notes, tmp_path / "d", capsys, caplog), tmp_path / "d"),
    ):
        failed_alone(run, out, "lonely.ann", "no .txt file beside it")


# -- texts that are odd but valid: processed, offsets kept ----------------------------------------------
ODD_TEXTS = {
    "CRLF line ends": f"Seen:\r\nPatient {MARKER}\r\non 03/14/2024.\r\n",
    "lone CR": f"Seen:\rPatient {MARKER}\ron 03/14/2024.\r",
    "UTF-8 BOM": f"\ufeffPatient {MARKER} on 03/14/2024.\n",
    "control characters": f"\x1b[31mPatient\x07 {MARKER}\x08\x0c on 03/14/2024.\x7f\n",
    "RTL and combining": f"\u202eמטופל\u202c Patient {MARKER} e\u0301\u0327 \u0645\u0631\u064a\u0636 on 03/14/2024.\n",
    "emoji and astral": f"\U0001f600 Patient {MARKER} \U0001d4d0\U00020000 on 03/14/2024 \U0001f468\u200d\U0001f469.\n",
}


@pytest.mark.parametrize("kind", list(ODD_TEXTS))
@pytest.mark.parametrize("fmt", ["brat", "i2b2"])
def test_odd_texts_are_processed_with_their_offsets(kind, fmt, tmp_path, capsys, caplog):
    text = ODD_TEXTS[kind]
    notes = write(tmp_path / "in", {"odd.txt": text.encode("utf-8")})
    out = tmp_path / "out"
    run = annotate(notes, out, capsys, caplog, "--format", fmt)
    if fmt == "i2b2" and kind == "control characters":  # XML 1.0 cannot hold them: a clear refusal
        failed = [e for e in run.errors if e.startswith("odd.txt: ")]
        assert run.code == 2 and failed and "ValueError" in failed[0]
        no_temp_files(out)
        run.clean()
        return
    assert run.code == 0, run.errors
    (doc,) = read_document(out / f"odd.{'ann' if fmt == 'brat' else 'xml'}")
    assert doc.text == text  # every character kept, so every offset too
    if fmt == "brat":
        assert (out / "odd.txt").read_bytes() == text.encode("utf-8")
    from hybriddeid import Pipeline

    expected = Pipeline.load("en").predict(Document("odd", text))
    assert expected and [(s.start, s.end, s.label) for s in doc.spans] == [(s.start, s.end, s.label) for s in expected]
    no_temp_files(out)
    run.clean()


def test_cp1252_with_encoding(tmp_path, capsys, caplog):
    text = f"Patient {MARKER} \u2019s caf\xe9 visit on 03/14/2024 \u2013 ok.\r\n"
    notes = write(tmp_path / "in", {"good.txt": GOOD, "win.txt": text.encode("cp1252")})
    run = annotate(notes, tmp_path / "refused", capsys, caplog)
    failed_alone(run, tmp_path / "refused", "win.txt", "--encoding")
    run = annotate(notes, tmp_path / "out", capsys, caplog, "--encoding", "cp1252", "--format", "jsonl")
    assert run.code == 0, run.errors
    (doc,) = read_document(tmp_path / "out" / "win.jsonl")
    assert doc.text == text and any(doc.span_text(s) == MARKER for s in doc.spans)
    run.clean()
    run = Run(["annotate", str(notes), str(tmp_path / "x"), "--encoding", "no-such-codec"], capsys, caplog)
    assert run.code == 2 and "unknown encoding" in run.errors[0]


def test_a_megabyte_of_digits_on_one_line(tmp_path, capsys, caplog):
    notes = write(tmp_path / "in", {"good.txt": GOOD, "digits.txt": "1" * 1_000_000 + f"\n{MARKER}\n"})
    run = annotate(notes, tmp_path / "out", capsys, caplog, "--timeout-per-note", "120", "--memory-limit-mb", "1000")
    assert run.code == 0, (
        run.errors
    )  # 1 GB of address space beyond the worker's start: long runs are read in bounded windows
    assert (tmp_path / "out" / "digits.ann").is_file()
    run.clean()


# -- ReDoS baits: every bundled rule, each on strings of what its pattern repeats -----------------------
_REPEATED = re.compile(r"(\\[dwsDWS]|\\.|\[(?:\\.|[^\]])+\]|[^\\()|?*+{}])(?:[*+]|\{\d*,\d*\})")


def _char_of(atom: str) -> str:
    """One character the atom of a regex matches (near enough for a bait)."""
    simple = {r"\d": "7", r"\w": "a", r"\s": " ", r"\D": "a", r"\W": "-", r"\S": "x", ".": "x"}
    if atom in simple:
        return simple[atom]
    if atom.startswith("\\"):
        return atom[1]
    if atom.startswith("[") and not atom.startswith("[^"):
        inner = atom[1:-1]
        if inner.startswith("\\"):
            return simple.get(inner[:2], inner[1])
        return inner[0]
    return "x" if atom.startswith("[^") else atom


def baits(pattern: str, length: int = 20_000) -> list[str]:
    chars = [_char_of(atom) for atom in _REPEATED.findall(pattern)] or ["x"]
    found = ["".join(chars) * (length // len(chars))]
    found += [c * length for c in dict.fromkeys(chars)]
    found.append((" ".join(chars) + " ") * (length // (2 * len(chars))))
    return found


def bundled_rules():
    from hybriddeid.classifiers.rules import RuleClassifier

    return [(language, rule) for language in ("en", "es") for rule in RuleClassifier(language).rules]


def test_every_bundled_rule_gives_up_on_its_bait_within_the_timeout(tmp_path):
    from hybriddeid.classifiers.rules import DEFAULT_TIMEOUT

    rules = bundled_rules()
    assert len(rules) >= 70
    slow = []
    for language, rule in rules:
        for bait in baits(rule.pattern):
            started = time.perf_counter()
            with contextlib.suppress(TimeoutError):
                rule.spans(bait, timeout=DEFAULT_TIMEOUT)
            if time.perf_counter() - started > DEFAULT_TIMEOUT + 1.0:
                slow.append(f"{language}:{rule.name}")
    assert slow == []


@pytest.mark.parametrize("language", ["en", "es"])
def test_a_note_of_rule_baits_is_still_processed(language, tmp_path, capsys, caplog):
    text = "\n".join(
        bait[:2000] for lang, rule in bundled_rules() if lang == language for bait in baits(rule.pattern, 2000)[:2]
    )
    notes = write(tmp_path / "in", {"good.txt": GOOD, "bait.txt": f"{MARKER}\n{text}\n"})
    run = annotate(notes, tmp_path / "out", capsys, caplog, "--model", language, "--timeout-per-note", "300")
    assert run.code == 0, run.errors
    assert (tmp_path / "out" / "bait.ann").is_file()
    run.clean()


# -- names, folders and files that are not what they seem ------------------------------------------------
def test_two_formats_in_one_folder_are_refused_as_a_whole(tmp_path, capsys, caplog):
    notes = write(tmp_path / "in", {"a.txt": GOOD, "a.xml": xml(GOOD)})
    run = annotate(notes, tmp_path / "out", capsys, caplog)
    assert run.code == 2 and "holds several formats" in run.errors[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    run.clean()


def test_a_note_name_used_twice_fails_the_second_file(tmp_path, capsys, caplog):
    line = json.dumps({"name": "same", "text": GOOD}) + "\n"
    notes = write(
        tmp_path / "in",
        {
            "good.jsonl": '{"name": "good", "text": "x"}\n',
            "one.jsonl": line,
            "two.jsonl": line,
            "dup.jsonl": line + line,
        },
    )
    run = Run(["deid", "--model", "en", "--mode", "tag", str(notes), str(tmp_path / "out")], capsys, caplog)
    assert run.code == 1
    assert sorted(e.split(":")[0] for e in run.errors) == ["dup.jsonl", "two.jsonl"]
    assert "used twice" in " ".join(run.errors) and "already used by one.jsonl" in " ".join(run.errors)
    assert sorted(p.name for p in (tmp_path / "out").glob("*.jsonl")) == ["good.jsonl", "one.jsonl"]
    run.clean()


def test_read_only_output_folder_is_one_clear_message(tmp_path, capsys, caplog, monkeypatch):
    notes = write(tmp_path / "in", {"good.txt": GOOD})
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o500)
    if os.geteuid() == 0:  # root may write anyway: the system's refusal is simulated where the check asks
        from hybriddeid.runs import batch

        real_open = os.open

        def refusing(path, flags, *args, **kwargs):
            if Path(path).parent == out and flags & os.O_CREAT:
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(batch.os, "open", refusing)
    try:
        for args in (["annotate", "--model", "en"], ["deid", "--model", "en", "--mode", "tag"]):
            run = Run([*args, str(notes), str(out)], capsys, caplog)
            assert run.code == 2 and run.errors == [f"{out}: cannot write into this output folder (Permission denied)"]
            run.clean()
    finally:
        out.chmod(0o700)
    assert list(out.iterdir()) == []


def test_unwritable_audit_folder_is_one_clear_message(tmp_path, capsys, caplog, monkeypatch):
    """As root cannot be refused a folder, the refusal is simulated where the check asks the system."""
    from hybriddeid.runs import batch

    notes = write(tmp_path / "in", {"good.txt": GOOD})
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):
        if f"{os.sep}audit{os.sep}" in str(path) and flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(batch.os, "open", refusing)
    run = Run(["deid", "--model", "en", "--mode", "tag", str(notes), str(tmp_path / "out")], capsys, caplog)
    assert run.code == 2 and run.errors == [
        f"{tmp_path / 'out' / 'audit'}: cannot write into this output folder (Permission denied)"
    ]
    assert not (tmp_path / "out" / "good.txt").exists()


@pytest.mark.parametrize("where", ["inside", "around"])
def test_nested_input_and_output_folders_are_refused(where, tmp_path, capsys, caplog):
    notes = write(tmp_path / "in", {"good.txt": GOOD})
    out = notes / "out" if where == "inside" else tmp_path
    run = annotate(notes, out, capsys, caplog)
    assert run.code == 2 and len(run.errors) == 1
    assert ("lies inside the input directory" if where == "inside" else "holds the input directory") in run.errors[0]
    assert sorted(p.name for p in notes.iterdir()) == ["good.txt"]


def test_symlink_out_of_the_input_folder_is_refused_unless_followed(tmp_path, capsys, caplog):
    secret = tmp_path / "elsewhere" / "secret.txt"
    write(secret.parent, {"secret.txt": f"Patient {MARKER}.\n"})
    notes = write(tmp_path / "in", {"good.txt": GOOD, "inner.txt": GOOD})
    (notes / "link.txt").symlink_to(secret)
    (notes / "alias.txt").symlink_to(notes / "inner.txt")  # a link within the folder is fine
    run = annotate(notes, tmp_path / "out", capsys, caplog)
    failed_alone(run, tmp_path / "out", "link.txt", "symbolic link leading out of the input folder")
    assert (tmp_path / "out" / "alias.ann").is_file()
    run = annotate(notes, tmp_path / "followed", capsys, caplog, "--follow-symlinks")
    assert run.code == 0 and (tmp_path / "followed" / "link.ann").is_file()


def test_a_folder_named_like_a_note_is_reported(tmp_path, capsys, caplog):
    notes = write(tmp_path / "in", {"good.txt": GOOD})
    (notes / "x.txt").mkdir()
    run = annotate(notes, tmp_path / "out", capsys, caplog)
    failed_alone(run, tmp_path / "out", "x.txt", "is a folder, not a regular file")


def test_a_fifo_named_like_a_note_is_reported_without_blocking(tmp_path, capsys, caplog):
    notes = write(tmp_path / "in", {"good.txt": GOOD})
    os.mkfifo(notes / "x.txt")
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("reading the FIFO blocked"))
    signal.alarm(60)
    try:
        run = annotate(notes, tmp_path / "out", capsys, caplog)
    finally:
        signal.alarm(0)
    failed_alone(run, tmp_path / "out", "x.txt", "is a FIFO (named pipe), not a regular file")


def test_a_file_over_the_size_limit(tmp_path, capsys, caplog):
    notes = write(tmp_path / "in", {"good.txt": GOOD})
    with open(notes / "huge.txt", "wb") as handle:  # sparse: the size is checked before any reading
        handle.truncate(20_000_001)
    run = annotate(notes, tmp_path / "out", capsys, caplog)
    failed_alone(run, tmp_path / "out", "huge.txt", "file is 20000001 bytes, over the limit of 20000000")


def test_a_file_deleted_between_listing_and_reading(tmp_path, capsys, caplog, monkeypatch):
    from hybriddeid.io import core

    notes = write(tmp_path / "in", {"good.txt": GOOD, "gone.txt": GOOD})
    listing = core._inputs

    def list_then_delete(in_dir, fmt):
        paths = listing(in_dir, fmt)
        (notes / "gone.txt").unlink()
        return paths

    monkeypatch.setattr(core, "_inputs", list_then_delete)
    run = annotate(notes, tmp_path / "out", capsys, caplog)
    failed_alone(run, tmp_path / "out", "gone.txt", "cannot read file (No such file or directory)")


# -- notes that kill or hang their worker ---------------------------------------------------------------
def sabotage(monkeypatch, action) -> None:
    """The model does ``action()`` on the note holding "SABOTAGE" (in the forked worker)."""
    from hybriddeid.pipeline.core import Pipeline

    original = Pipeline.predict

    def predict(self, doc, *args, **kwargs):
        if "SABOTAGE" in (doc.text if isinstance(doc, Document) else doc):
            faulthandler.disable()  # a deliberate crash: no fault dump in the test output
            action()
        return original(self, doc, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "predict", predict)


def test_the_memory_limit_counts_from_what_a_worker_holds_when_it_starts():
    """A CUDA build of torch reserves ~3.7 GB of address space at import; an absolute 4 GB cap left a
    neural model's worker no room to start its threads. The cap is what a worker may add."""
    script = (
        "import mmap, resource; from hybriddeid.runs.batch import limit_memory; "
        "held = mmap.mmap(-1, 2 * 2**30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0); "  # reserved, PROT_NONE, as torch does
        "limit_memory(256); cap = resource.getrlimit(resource.RLIMIT_AS)[0]; "
        "room = bytearray(128 * 2**20); del room\n"
        "try:\n    bytearray(512 * 2**20); print('no cap')\nexcept MemoryError:\n    print('capped', cap > 2 * 2**30)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["capped", "True"], done.stderr[-2000:]


CRASHES = {
    "segfault": (lambda: os.kill(os.getpid(), signal.SIGSEGV), [], "worker crashed (SIGSEGV, signal 11)"),
    "os._exit": (lambda: os._exit(3), [], "worker exited (status 3) before finishing"),
    "memory": (lambda: bytearray(8 * 2**30), ["--memory-limit-mb", "400"], "worker exceeded the memory limit of"),
    # 8 s, not 2: a good note (its worker reading the model first) took over 2 s with the suite in two
    # workers on a loaded machine, and failed as if it had hung
    "time": (lambda: time.sleep(60), ["--timeout-per-note", "8"], "worker killed: timed out after 8 s"),
}


def test_a_time_limit_per_note_does_not_count_a_first_run_of_the_rules(tmp_path):
    """With no cached rule prefilter (a fresh machine, a rule set changed) each worker compiled it on its first note,
    seconds against --timeout-per-note, was killed, and the next worker began again: every note failed. The run
    now builds it once before its workers fork."""
    notes = write(tmp_path / "in", {f"good{i}.txt": GOOD for i in range(4)})
    env = {**os.environ, "HYBRIDDEID_CACHE_DIR": str(tmp_path / "empty-cache")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybriddeid.cli",
            "annotate",
            str(notes),
            str(tmp_path / "out"),
            "--jobs",
            "2",
            "--timeout-per-note",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,  # the installed package, not the checkout's sources
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(path.name for path in (tmp_path / "out").glob("*.ann")) == [f"good{i}.ann" for i in range(4)]


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("kind", list(CRASHES))
def test_a_note_that_kills_its_worker_fails_alone(kind, jobs, tmp_path, capsys, caplog, monkeypatch):
    action, options, problem = CRASHES[kind]
    sabotage(monkeypatch, action)
    files = {f"good{i}.txt": GOOD for i in range(4)}
    notes = write(tmp_path / "in", {**files, "bad.txt": f"SABOTAGE {MARKER}\n"})
    for run_args, out in (
        (["annotate", "--model", "en"], tmp_path / "ann"),
        (["deid", "--model", "en", "--mode", "tag"], tmp_path / "deid"),
    ):
        run = Run([*run_args, str(notes), str(out), "--jobs", jobs, *options], capsys, caplog)
        assert run.code == 1, run.errors
        assert run.errors == [f"bad.txt: {problem}"] or (
            run.errors[0].startswith(f"bad.txt: {problem}") and len(run.errors) == 1
        ), run.errors
        assert sorted(p.stem for p in out.glob("*.txt")) == sorted(Path(name).stem for name in files) or sorted(
            p.stem for p in out.glob("*.ann")
        ) == sorted(Path(name).stem for name in files)
        assert not (out / "audit" / "bad.jsonl").exists()
        no_temp_files(out)
        run.clean()
        if kind == "time":
            assert run.seconds < 30


def test_a_model_that_cannot_load_is_told_once(tmp_path, capsys, caplog, monkeypatch):
    from hybriddeid.runs import batch, processing

    def broken(model, engine=None, device=None):
        raise OSError(5, "Input/output error", "model/char/char.crfsuite")

    monkeypatch.setattr(processing, "load_model", broken)
    monkeypatch.setattr(batch, "load_model", broken)
    notes = write(tmp_path / "in", {f"n{i}.txt": GOOD for i in range(5)})
    for jobs in ("1", "3"):
        run = annotate(notes, tmp_path / f"out{jobs}", capsys, caplog, "--jobs", jobs)
        assert run.code == 2 and len(run.errors) == 1, run.errors
        assert run.errors[0].startswith("cannot set up the run: OSError")
        run.clean()


def test_stale_temp_files_are_removed_and_new_ones_are_private(tmp_path, capsys, caplog, monkeypatch):
    notes = write(tmp_path / "in", {"good.txt": GOOD})
    out = tmp_path / "out"
    (out / "audit").mkdir(parents=True)
    stale = [out / ".good.txt.0123456789ab.tmp", out / "audit" / ".good.jsonl.ba9876543210.tmp"]
    for path in stale:
        path.write_text(MARKER, encoding="utf-8")
    keep = out / "audit" / ".notes.tmp"  # not named as ours: left alone
    keep.write_text("x", encoding="utf-8")
    modes = []
    real_replace = os.replace

    def watching(src, dst):
        modes.append(os.stat(src).st_mode & 0o777 if str(src).endswith(".tmp") else None)
        return real_replace(src, dst)

    from hybriddeid.io import _common

    real_open = os.open

    def opening(path, flags, mode=0o777, *args):
        if str(path).endswith(".tmp") and flags & os.O_CREAT:
            modes.append(("created", mode))
        return real_open(path, flags, mode, *args)

    monkeypatch.setattr(_common.os, "open", opening)
    run = Run(["deid", "--model", "en", "--mode", "tag", str(notes), str(out)], capsys, caplog)
    assert run.code == 0, run.errors
    assert not any(path.exists() for path in stale) and keep.exists()
    assert modes and all(entry == ("created", 0o600) for entry in modes)


def test_errors_never_share_a_line_with_the_progress_bar(tmp_path):
    """The bad note fails while the bar is drawn (XML cannot hold its BEL character), among good ones."""
    notes = write(
        tmp_path / "in",
        {
            **{f"good{i}.txt": GOOD for i in range(3)},
            "bad.txt": f"\x07{MARKER}\n",
            **{f"later{i}.txt": GOOD for i in range(3)},
        },
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from hybriddeid.cli import main; sys.exit(main())",
            "annotate",
            "--model",
            "en",
            "--format",
            "i2b2",
            str(notes),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )  # the installed package
    assert proc.returncode == 1
    pieces = re.split(r"[\r\n]", proc.stderr)
    errors = [piece for piece in pieces if "bad.txt" in piece]
    assert errors and all(piece.startswith("hybriddeid: ") for piece in errors), proc.stderr
    assert MARKER not in proc.stderr + proc.stdout


def test_many_dying_workers_are_each_replaced(tmp_path, caplog):
    """Every third note kills its worker: each fails alone, by name, and every other note is written."""
    from hybriddeid.runs.batch import Limits, run_batch

    notes = write(tmp_path / "in", {f"n{i:02d}.txt": ("DIE " if i % 3 == 0 else "") + GOOD for i in range(12)})

    def transform(doc: Document) -> Document:
        if doc.text.startswith("DIE"):
            os._exit(9)
        return doc

    for jobs in (1, 3):
        result = run_batch(
            notes,
            tmp_path / f"out{jobs}",
            transform,
            "jsonl",
            progress=False,
            jobs=jobs,
            limits=Limits(timeout_per_note=60),
        )
        assert [(p.name, problem) for p, problem in result.failed] == [
            (f"n{i:02d}.txt", "worker exited (status 9) before finishing") for i in (0, 3, 6, 9)
        ]
        assert sorted(p.name for p in (tmp_path / f"out{jobs}").iterdir()) == [
            f"n{i:02d}.jsonl" for i in range(12) if i % 3
        ]
        assert result.exit_code == 1
