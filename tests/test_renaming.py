"""``deid --rename``: outputs, audits and messages under a keyed hash of each file name, the owner-only
names file beside the key, resume with renamed outputs; and the warning when names that look like PHI
are copied."""

from __future__ import annotations

import json
import logging
import re
import stat
from pathlib import Path

import pytest

from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.io import read_corpus, write_document
from hybriddeid.runs.deid import DeidProcessor, run_deid
from hybriddeid.runs.renaming import HASH_CHARS, Renamer, names_file
from hybriddeid.surrogates import DeidOptions, read_key
from hybriddeid.surrogates.patients import PatientMap

# Exports named after their patients: every stem, and each PHI piece of one, is a leak wherever it shows.
NOTES = {
    "Zebulon_Quagmire_pt01_visit1": ("Zebulon Quagmire", "4417920"),
    "Zebulon_Quagmire_pt01_visit2": ("Zebulon Quagmire", "4417920"),
    "Ximena_Urquidi_pt02_visit1": ("Ximena Urquidi", "5523011"),
    "Bartolo_Yanez_SSN123-45-6789_pt03_visit1": ("Bartolo Yanez", "6634102"),
}
NAME_PIECES = ["Zebulon", "Quagmire", "Ximena", "Urquidi", "Bartolo", "Yanez", "123-45-6789"]
PATIENT_PATTERN = r"_(pt\d+)_"
HASHED = re.compile(rf"[0-9a-f]{{{HASH_CHARS}}}")


def make_note(stem: str) -> Document:
    name, mrn = NOTES[stem]
    text = f"Patient: {name}.\nMRN: {mrn}.\nSeen on 03/14/2023 for chest pain; follow up in two weeks.\n"
    phi = [(name, "PATIENT"), (mrn, "MEDICALRECORD"), ("03/14/2023", "DATE")]
    return Document(stem, text, tuple(Span(text.index(v), text.index(v) + len(v), label) for v, label in phi))


@pytest.fixture()
def named_dir(tmp_path) -> Path:
    for stem in NOTES:
        write_document(make_note(stem), tmp_path / "in", "brat")
    return tmp_path / "in"


def deid(in_dir: Path, out_dir: Path, key: Path, *extra: str) -> int:
    return main(
        [
            "-q",
            "deid",
            str(in_dir),
            str(out_dir),
            "--use-annotations",
            "--language",
            "en",
            "--mode",
            "surrogate",
            "--key-file",
            str(key),
            "--patient-pattern",
            PATIENT_PATTERN,
            *extra,
        ]
    )


def files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*")) if p.is_file()}


def leaks(text: str) -> list[str]:
    return [piece for piece in [*NOTES, *NAME_PIECES] if piece in text]


def test_outputs_and_audits_go_by_a_keyed_hash_stable_for_one_key(named_dir, tmp_path):
    key, other = tmp_path / "keys" / "key", tmp_path / "keys" / "other"
    key.parent.mkdir()
    assert deid(named_dir, tmp_path / "a", key, "--rename", "hash") == 0
    assert deid(named_dir, tmp_path / "b", key, "--rename", "hash") == 0
    assert deid(named_dir, tmp_path / "c", other, "--rename", "hash") == 0
    assert deid(named_dir, tmp_path / "plain", key) == 0  # no renaming: names copied, as before
    a, b, c, plain = (files(tmp_path / name) for name in ("a", "b", "c", "plain"))
    assert a == b  # same key: same names, same contents
    renamer = Renamer(read_key(key))
    stems = {renamer.hashed(stem): stem for stem in NOTES}
    assert {Path(name).name for name in a} == {
        *(f"{h}{ext}" for h in stems for ext in (".txt", ".ann")),
        *(f"{h}.jsonl" for h in stems),
        "run.json",
        "summary.json",
    }
    assert all(
        HASHED.fullmatch(Path(name).name.split(".")[0]) for name in a if "run" not in name and "summary" not in name
    )
    assert not set(a) & set(c) - {"audit/run.json", "audit/summary.json"}  # another key: other names
    for name, content in a.items():
        assert not leaks(name) and not leaks(content), name  # audits' note field, summary.json, run.json too
    assert json.loads(a["audit/run.json"])["rename"] == "hash" and "rename" not in json.loads(plain["audit/run.json"])
    for hashed, stem in stems.items():  # renaming changes names only: texts, spans, patients as without it
        assert a[f"{hashed}.txt"] == plain[f"{stem}.txt"] and a[f"{hashed}.ann"] == plain[f"{stem}.ann"]
        audit = [json.loads(line) for line in a[f"audit/{hashed}.jsonl"].splitlines()]
        assert {row["note"] for row in audit} == {hashed}
    surrogate = {doc.name: doc.text.splitlines()[0] for doc in read_corpus(tmp_path / "a")}
    visits = [renamer.hashed("Zebulon_Quagmire_pt01_visit1"), renamer.hashed("Zebulon_Quagmire_pt01_visit2")]
    assert surrogate[visits[0]] == surrogate[visits[1]]  # one patient, one surrogate name


def test_the_names_file_is_owner_only_beside_the_key_and_merged(named_dir, tmp_path):
    key = tmp_path / "key"
    assert deid(named_dir, tmp_path / "a", key, "--rename", "hash") == 0
    mapping = names_file(key)
    assert mapping == tmp_path / "key.names.json" and stat.S_IMODE(mapping.stat().st_mode) == 0o600
    recorded = json.loads(mapping.read_text(encoding="utf-8"))
    renamer = Renamer(read_key(key))
    assert recorded["names"] == {renamer.hashed(stem): {"name": stem, "files": [f"{stem}.txt"]} for stem in NOTES}
    assert recorded["format"] == "hybriddeid-names" and "key" not in json.dumps(recorded).replace("key_fingerprint", "")
    write_document(
        Document("Ximena_Urquidi_pt02_visit2", "Patient: Ximena Urquidi.\n", (Span(9, 23, "PATIENT"),)),
        named_dir,
        "brat",
    )
    mapping.chmod(0o644)
    stale = tmp_path / ".key.names.json.0123456789ab.tmp"  # a run killed while writing it
    stale.write_text("Zebulon_Quagmire_pt01_visit1", encoding="utf-8")
    other = tmp_path / ".other.0123456789ab.tmp"
    other.write_text("not ours", encoding="utf-8")
    assert deid(named_dir, tmp_path / "b", key, "--rename", "hash") == 0  # another output folder, same key
    assert not stale.exists() and other.exists()
    merged = json.loads(mapping.read_text(encoding="utf-8"))["names"]
    assert set(merged) == set(recorded["names"]) | {renamer.hashed("Ximena_Urquidi_pt02_visit2")}
    assert stat.S_IMODE(mapping.stat().st_mode) == 0o600  # rewritten owner-only


def test_hash_only_records_no_names_and_a_key_is_required(named_dir, tmp_path, caplog):
    key = tmp_path / "key"
    assert deid(named_dir, tmp_path / "a", key, "--rename", "hash-only") == 0
    assert not names_file(key).exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith("key")] == ["key"]
    assert deid(named_dir, tmp_path / "b", key, "--rename", "hash") == 0  # the same names, now recorded
    assert sorted(p.name for p in (tmp_path / "a").glob("*.txt")) == sorted(
        p.name for p in (tmp_path / "b").glob("*.txt")
    )
    assert (
        main(
            [
                "-q",
                "deid",
                str(named_dir),
                str(tmp_path / "c"),
                "--use-annotations",
                "--language",
                "en",
                "--rename",
                "hash",
            ]
        )
        == 2
    )
    assert "--rename hash needs --key-file" in caplog.text and not (tmp_path / "c").exists()


def test_resume_skips_renamed_notes_already_done(named_dir, tmp_path):
    key = tmp_path / "key"
    assert deid(named_dir, tmp_path / "out", key, "--rename", "hash") == 0
    out = tmp_path / "out"
    renamer = Renamer(read_key(key), key)
    damaged = out / f"{renamer.hashed('Ximena_Urquidi_pt02_visit1')}.txt"
    damaged.write_text("cut short", encoding="utf-8")
    before = files(out)
    processor = DeidProcessor(
        DeidOptions(mode="surrogate", language="en", key=read_key(key)),
        PatientMap(pattern=PATIENT_PATTERN),
        model=None,
        renamer=renamer,
    )
    result, _ = run_deid(named_dir, out, processor, progress=False)
    assert [p.stem for p in result.written] == ["Ximena_Urquidi_pt02_visit1"]  # the damaged note alone is redone
    assert len(result.skipped) == 3 and not result.failed
    after = files(out)
    assert after[damaged.name] != "cut short"
    assert {k: v for k, v in after.items() if k not in (damaged.name, "audit/summary.json")} == {
        k: v for k, v in before.items() if k not in (damaged.name, "audit/summary.json")
    }


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_messages_tell_files_by_their_hash_only(named_dir, tmp_path, capsys, caplog, jobs):
    """An unreadable file, a note no patient pattern matches, gold spans that overlap: every line that
    would have named the file names its hash instead."""
    (named_dir / "Zebulon_Quagmire_pt01_visit3.txt").write_text("Patient: Zebulon Quagmire.\n", encoding="utf-8")
    write_document(
        Document("Ximena_Urquidi_nopatient", "Patient: Ximena Urquidi.\n", (Span(9, 23, "PATIENT"),)), named_dir, "brat"
    )
    overlapping = named_dir / "Bartolo_Yanez_SSN123-45-6789_pt03_visit1.ann"
    overlapping.write_text(overlapping.read_text() + "T9\tPATIENT 9 16\tBartolo\n", encoding="utf-8")
    caplog.set_level(logging.DEBUG)
    key = tmp_path / "key"
    code = main(
        [
            "deid",
            str(named_dir),
            str(tmp_path / "out"),
            "--use-annotations",
            "--language",
            "en",
            "--mode",
            "surrogate",
            "--key-file",
            str(key),
            "--patient-pattern",
            PATIENT_PATTERN,
            "--rename",
            "hash",
            "--jobs",
            jobs,
            "--progress",
            "always",
        ]
    )
    assert code == 1
    captured = capsys.readouterr()
    assert not leaks(captured.out + captured.err + caplog.text)
    renamer = Renamer(read_key(key))
    errors = sorted(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert errors == sorted(
        [
            f"{renamer.hashed('Zebulon_Quagmire_pt01_visit3')}.txt: no .ann file beside it",
            f"{renamer.hashed('Ximena_Urquidi_nopatient')}.txt: note "
            f"{renamer.hashed('Ximena_Urquidi_nopatient')!r} does not match --patient-pattern",
        ]
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    overlap = f"{renamer.hashed('Bartolo_Yanez_SSN123-45-6789_pt03_visit1')}.ann: spans"
    assert any(m.startswith(overlap) for m in warnings), warnings
    assert not any("look like they hold PHI" in m for m in warnings)  # renamed: nothing to warn of


def test_without_renaming_names_that_look_like_phi_get_one_warning_by_count(named_dir, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    assert deid(named_dir, tmp_path / "a", tmp_path / "key") == 0
    warnings = [r.getMessage() for r in caplog.records if "look like they hold PHI" in r.getMessage()]
    assert warnings == [
        "1 of 4 input file names look like they hold PHI (the en PHI rules find some in them); "
        "outputs, audits and messages copy file names as they are: --rename hash writes and tells "
        "them under a keyed hash instead"
    ]  # the SSN; names alone are no rule's to find
    assert not leaks(caplog.text)
    caplog.clear()
    benign = tmp_path / "benign"
    for number, stem in enumerate(NOTES, 1):
        note = make_note(stem)
        write_document(Document(f"note_{number:03d}_pt0{number}_x", note.text, note.spans), benign, "brat")
    assert deid(benign, tmp_path / "b", tmp_path / "key") == 0
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_files_of_several_notes_are_renamed_with_their_notes(tmp_path):
    export = tmp_path / "in" / "Zebulon_Quagmire_export.jsonl"
    export.parent.mkdir()
    records = [
        {
            "name": f"Zebulon_Quagmire_visit{i}",
            "text": "Patient: Zebulon Quagmire.\n",
            "spans": [{"start": 9, "end": 25, "label": "PATIENT"}],
        }
        for i in (1, 2)
    ]
    export.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    key = tmp_path / "key"
    assert (
        main(
            [
                "-q",
                "deid",
                str(export.parent),
                str(tmp_path / "out"),
                "--use-annotations",
                "--language",
                "en",
                "--rename",
                "hash",
                "--key-file",
                str(key),
            ]
        )
        == 0
    )
    renamer = Renamer(read_key(key))
    out = files(tmp_path / "out")
    written = [json.loads(line) for line in out[f"{renamer.hashed('Zebulon_Quagmire_export')}.jsonl"].splitlines()]
    assert [r["name"] for r in written] == [renamer.hashed(f"Zebulon_Quagmire_visit{i}") for i in (1, 2)]
    assert not any("Zebulon" in name or "Zebulon" in text for name, text in out.items())
    names = json.loads(names_file(key).read_text(encoding="utf-8"))["names"]
    assert names[renamer.hashed("Zebulon_Quagmire_export")] == {
        "name": "Zebulon_Quagmire_export",
        "files": ["Zebulon_Quagmire_export.jsonl"],
    }
    assert names[renamer.hashed("Zebulon_Quagmire_visit2")] == {
        "name": "Zebulon_Quagmire_visit2",
        "files": ["Zebulon_Quagmire_export.jsonl"],
    }
