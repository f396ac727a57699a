"""``hybriddeid deid --input-format fhir``: FHIR R4 Bundles and Bulk Data NDJSON of DocumentReference and
DiagnosticReport resources de-identified and written back as valid resources (issue 26, item 3)."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import logging
import re
from datetime import date
from pathlib import Path

import pytest

pytest.importorskip("fhir.resources", reason="FHIR input needs fhir.resources (pip install 'hybriddeid[fhir]')")

from cli_runs import FAST_CLI, TEMP, files, kill_9_after, run, slow_cli  # noqa: E402
from hybriddeid.cli import main  # noqa: E402
from hybriddeid.io.fhir import (  # noqa: E402
    DATA_ABSENT_REASON,
    SECURITY_SYSTEM,
    html_text,
    html_with_edits,
    read_fhir,
    validation_problem,
)
from hybriddeid.surrogates.keys import render_key  # noqa: E402

NOTE_1 = (
    "Patient John Smith was seen on 03/14/2023 by Dr. Alice Grant.\n"
    "MRN 4417920. Phone (617) 555-1234.\nLives in Boston, MA.\n"
)
NOTE_2 = "CT head for John Smith on 03/15/2023, ordered by Dr. Grant.\n"
NOTE_OTHER = "Patient Maria Okonkwo was seen on 05/02/2023 by Dr. Alice Grant.\n"
HTML = (
    "<html><body><p>Patient <b>John</b> Smith &amp; wife seen 03/14/2023.</p>"
    "<!-- John Smith --><p>Dr. Grant</p></body></html>"
)
NARRATIVE = '<div xmlns="http://www.w3.org/1999/xhtml"><p>Discharge note for John Smith, 03/14/2023</p></div>'
PHI = ("John", "Smith", "Alice Grant", "4417920", "555-1234", "Boston", "Okonkwo", "2023-03-14", "03/14/2023")


def phi_in(text: str) -> list[str]:
    """The original values still in ``text`` as whole words ("Johnson" may be a surrogate)."""
    return [value for value in PHI if re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text)]


def b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def decoded(attachment: dict) -> str:
    return base64.b64decode(attachment["data"]).decode("utf-8")


def document_reference(rid: str, patient: str, display: str, note: str, **extra) -> dict:
    return {
        "resourceType": "DocumentReference",
        "id": rid,
        "status": "current",
        "date": "2023-03-14T10:00:00Z",
        "subject": {"reference": patient, "display": display},
        "author": [{"display": "Dr. Alice Grant"}],
        "content": [
            {
                "attachment": {
                    "contentType": "text/plain; charset=utf-8",
                    "data": b64(note),
                    "title": f"Note of {display}",
                    "creation": "2023-03-14",
                }
            }
        ],
        **extra,
    }


def diagnostic_report(rid: str, patient: str, display: str, note: str) -> dict:
    return {
        "resourceType": "DiagnosticReport",
        "id": rid,
        "status": "final",
        "code": {"text": "CT head"},
        "subject": {"reference": patient, "display": display},
        "effectiveDateTime": "2023-03-15",
        "issued": "2023-03-15T12:00:00Z",
        "conclusion": "No change since 03/14/2023 for Mr. Smith.",
        "presentedForm": [{"contentType": "text/plain", "data": b64(note)}],
    }


BAD = {
    "resourceType": "DocumentReference",
    "id": "bad1",
    "status": "current",
    "date": "14 March 2023",
    "content": [{"attachment": {"contentType": "text/plain", "data": b64("Seen by Dr. Alice Grant.")}}],
}


def bundle(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    doc = document_reference(
        "doc1", "Patient/p1", "Smith, John", NOTE_1, text={"status": "generated", "div": NARRATIVE}
    )
    doc["content"].append({"attachment": {"contentType": "text/html", "data": b64(HTML)}})
    entries = [
        doc,
        diagnostic_report("rep1", "Patient/p1", "John Smith", NOTE_2),
        BAD,
        {"resourceType": "Patient", "id": "p1", "name": [{"family": "Smith"}]},
    ]
    (folder / "bundle.json").write_text(
        json.dumps(
            {
                "resourceType": "Bundle",
                "type": "collection",
                "entry": [{"fullUrl": f"urn:uuid:{n}", "resource": r} for n, r in enumerate(entries)],
            }
        ),
        encoding="utf-8",
    )
    return folder


def write_ndjson(path: Path, *items: dict) -> None:
    """Bulk Data NDJSON: one resource a line (the folder is made if missing)."""
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")


def deid(in_dir: Path, out_dir: Path, *options: str) -> int:
    return main(["-q", "deid", "--input-format", "fhir", str(in_dir), str(out_dir), *options])


def surrogate(tmp_path: Path) -> list[str]:
    """Surrogate mode with a fixed key, so that what two patients draw is the same in every run (a fresh
    random key let two patients draw one name now and then, and the assertions that keep them apart
    failed by chance)."""
    key = tmp_path / "deid.key"
    if not key.exists():
        key.write_text(render_key(bytes(range(32))), encoding="utf-8")
        key.chmod(0o600)
    return ["--mode", "surrogate", "--key-file", str(key)]


def resources(path: Path) -> list[dict]:
    if path.suffix == ".ndjson":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [entry["resource"] for entry in json.loads(path.read_text(encoding="utf-8"))["entry"]]


def attachments(resource: dict) -> list[dict]:
    return [c["attachment"] for c in resource.get("content", [])] + resource.get("presentedForm", [])


def resource_text(resource: dict) -> str:
    """The resource with every attachment decoded: where PHI could hide."""
    return "\n".join([json.dumps(resource, ensure_ascii=False), *map(decoded, attachments(resource))])


def all_text(path: Path) -> str:
    return "\n".join([path.read_text(encoding="utf-8"), *map(resource_text, resources(path))])


def test_bundle_is_written_back_valid_labelled_and_without_the_phi(tmp_path, caplog):
    in_dir = bundle(tmp_path)
    with caplog.at_level(logging.ERROR):
        assert deid(in_dir, tmp_path / "out", *surrogate(tmp_path)) == 1  # the bad resource and the Patient failed
    out = resources(tmp_path / "out" / "bundle.json")
    assert [(r["resourceType"], r["id"]) for r in out] == [("DocumentReference", "doc1"), ("DiagnosticReport", "rep1")]
    written = json.loads((tmp_path / "out" / "bundle.json").read_text(encoding="utf-8"))
    assert written["type"] == "collection" and [e["fullUrl"] for e in written["entry"]] == ["urn:uuid:0", "urn:uuid:1"]
    for resource in out:
        assert validation_problem(resource) is None
        assert {"system": SECURITY_SYSTEM, "code": "PSEUDED", "display": "pseudonymized"} in resource["meta"][
            "security"
        ]
        for attachment in attachments(resource):
            data = base64.b64decode(attachment["data"])
            assert attachment["size"] == len(data)
            assert attachment["hash"] == base64.b64encode(hashlib.sha1(data).digest()).decode()
    text = all_text(tmp_path / "out" / "bundle.json")
    assert not phi_in(text)
    # the bad resource and the Patient are told by place and id, never by content
    messages = "\n".join(record.getMessage() for record in caplog.records)
    assert "entry 3 (DocumentReference/bad1): not a valid DocumentReference: date" in messages
    assert "entry 4 (Patient/p1)" in messages
    assert "Alice" not in messages and "March" not in messages
    summary = json.loads((tmp_path / "out" / "audit" / "summary.json").read_text())
    assert summary["files"] == {"written": 1, "skipped": 0, "failed": 2, "not_taken": 0}


def test_resource_elements_take_the_surrogates_and_date_shift_of_the_patients_text(tmp_path):
    in_dir = bundle(tmp_path)
    deid(in_dir, tmp_path / "out", *surrogate(tmp_path))
    doc, report = resources(tmp_path / "out" / "bundle.json")
    note_1 = decoded(doc["content"][0]["attachment"])
    surname, given = doc["subject"]["display"].split(", ")  # "Smith, John" keeps its layout
    assert f"Patient {given} {surname} was seen" in note_1
    assert report["subject"]["display"] == f"{given} {surname}"
    assert doc["content"][0]["attachment"]["title"] == f"Note of {surname}, {given}"
    doctor = doc["author"][0]["display"]
    assert doctor.startswith("Dr. ") and f"by {doctor}." in note_1
    assert doctor.split()[-1] in decoded(report["presentedForm"][0])  # "Dr. Grant" follows "Dr. Alice Grant"
    # one shift for the patient: the attachment's date and the resource's dates moved alike
    month, day, year = (int(part) for part in note_1.split("seen on ")[1][:10].split("/"))
    shift = date(year, month, day) - date(2023, 3, 14)
    assert shift.days != 0
    assert doc["date"] == f"{date(2023, 3, 14) + shift}T10:00:00Z"  # the time of day stays
    assert doc["content"][0]["attachment"]["creation"] == str(date(2023, 3, 14) + shift)
    assert report["effectiveDateTime"] == str(date(2023, 3, 15) + shift)
    assert report["issued"] == f"{date(2023, 3, 15) + shift}T12:00:00Z"
    assert (
        report["conclusion"] == f"No change since {(date(2023, 3, 14) + shift).strftime('%m/%d/%Y')} for Mr. {surname}."
    )


def test_html_attachment_and_narrative_keep_their_markup(tmp_path):
    deid(bundle(tmp_path), tmp_path / "out", *surrogate(tmp_path))
    doc = resources(tmp_path / "out" / "bundle.json")[0]
    surname = doc["subject"]["display"].split(", ")[0]
    page = decoded(doc["content"][1]["attachment"])
    assert page.startswith("<html><body><p>Patient <b>") and page.endswith("</p></body></html>")
    assert "&amp; wife seen " in page and "<!--" not in page  # entities kept, comments dropped
    assert f"<p>Dr. {doc['author'][0]['display'].split()[-1]}</p>" in page
    div = doc["text"]["div"]
    assert div.startswith('<div xmlns="http://www.w3.org/1999/xhtml"><p>Discharge note for ') and surname in div
    assert not phi_in(page + div)


def test_html_text_and_edits_map_back_into_the_markup():
    source = "<p>Dr.&nbsp;Jo<i>hn</i> Smith</p><br/>Tel &lt;617&gt;"
    text = html_text(source)
    assert text == "\nDr.\xa0John Smith\nTel <617>"
    start = text.index("John")
    edited = html_with_edits(
        source, [(start, start + len("John Smith"), "A & B"), (text.index("617"), text.index("617") + 3, "999")]
    )
    assert edited == "<p>Dr.&nbsp;A &amp; B<i></i></p><br/>Tel &lt;999&gt;"
    assert html_with_edits(source, []) == source


def test_ndjson_files_keep_one_patient_consistent_and_patients_apart(tmp_path):
    in_dir = tmp_path / "in"
    write_ndjson(
        in_dir / "DocumentReference.ndjson",
        document_reference("d1", "Patient/p1", "John Smith", NOTE_1),
        document_reference("d2", "Patient/p2", "Maria Okonkwo", NOTE_OTHER),
    )
    write_ndjson(in_dir / "DiagnosticReport.ndjson", diagnostic_report("r1", "Patient/p1", "John Smith", NOTE_2))
    assert deid(in_dir, tmp_path / "out", *surrogate(tmp_path)) == 0
    d1, d2 = resources(tmp_path / "out" / "DocumentReference.ndjson")
    (r1,) = resources(tmp_path / "out" / "DiagnosticReport.ndjson")
    assert d1["subject"]["display"] == r1["subject"]["display"] != "John Smith"
    assert d1["subject"]["display"] in decoded(r1["presentedForm"][0])  # across files, one patient
    assert d2["subject"]["display"] not in ("Maria Okonkwo", d1["subject"]["display"])  # another patient
    note_2 = decoded(d2["content"][0]["attachment"])
    assert note_2.startswith(f"Patient {d2['subject']['display']} was seen on ")
    month, day, year = (int(part) for part in note_2.split("seen on ")[1][:10].split("/"))
    assert d2["date"] == f"{date(year, month, day) - date(2023, 5, 2) + date(2023, 3, 14)}T10:00:00Z"  # p2's own shift
    # each patient's surrogates avoid that patient's own values (another's may come out as anything)
    assert not phi_in(resource_text(d1) + resource_text(r1))
    assert not [value for value in ("Maria", "Okonkwo", "05/02/2023", "Alice Grant") if value in resource_text(d2)]


def test_tag_mode_leaves_out_dates_that_are_no_longer_dates(tmp_path):
    assert deid(bundle(tmp_path), tmp_path / "out", "--mode", "tag") == 1
    doc, report = resources(tmp_path / "out" / "bundle.json")
    assert doc["subject"]["display"] == "[**NAME**]"
    assert "date" not in doc and "effectiveDateTime" not in report and "issued" not in report
    assert report["_issued"] == {"extension": [{"url": DATA_ABSENT_REASON, "valueCode": "masked"}]}
    assert {"system": SECURITY_SYSTEM, "code": "REDACTED", "display": "redacted"} in report["meta"]["security"]
    assert all(validation_problem(r) is None for r in (doc, report))


def test_attachments_give_what_deid_gives_for_the_same_text_byte_for_byte(tmp_path):
    """The same notes of one patient from a folder (``hybriddeid deid``) and from FHIR attachments."""
    in_dir = tmp_path / "fhir"
    write_ndjson(
        in_dir / "notes.ndjson",
        document_reference("d1", "Patient/p1", "John Smith", NOTE_1),
        diagnostic_report("r1", "Patient/p1", "John Smith", NOTE_2),
    )
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "one.txt").write_text(NOTE_1, encoding="utf-8")
    (folder / "two.txt").write_text(NOTE_2, encoding="utf-8")
    with open(tmp_path / "patients.csv", "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("note", "patient"), ("one", "Patient/p1"), ("two", "Patient/p1")])
    assert deid(in_dir, tmp_path / "fhir-out", *surrogate(tmp_path)) == 0
    assert (
        main(
            [
                "-q",
                "deid",
                str(folder),
                str(tmp_path / "folder-out"),
                *surrogate(tmp_path),
                "--patient-map",
                str(tmp_path / "patients.csv"),
            ]
        )
        == 0
    )
    d1, r1 = resources(tmp_path / "fhir-out" / "notes.ndjson")
    assert (
        base64.b64decode(d1["content"][0]["attachment"]["data"]) == (tmp_path / "folder-out" / "one.txt").read_bytes()
    )
    assert base64.b64decode(r1["presentedForm"][0]["data"]) == (tmp_path / "folder-out" / "two.txt").read_bytes()
    assert (tmp_path / "folder-out" / "one.txt").read_text() != NOTE_1


def test_unreadable_attachments_and_files_are_told_by_id_and_the_rest_goes_on(tmp_path, caplog):
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    pdf = document_reference("pdf1", "Patient/p1", "John Smith", NOTE_1)
    pdf["content"][0]["attachment"]["contentType"] = "application/pdf"
    latin = document_reference("lat1", "Patient/p1", "John Smith", NOTE_1)
    latin["content"][0]["attachment"].update(
        contentType="text/plain; charset=utf-8",
        data=base64.b64encode("Seen by Dr. Grant \xe9".encode("latin-1")).decode(),
    )
    good = document_reference("ok1", "Patient/p1", "John Smith", NOTE_1)
    (in_dir / "mixed.ndjson").write_text(
        "".join(json.dumps(r) + "\n" for r in (pdf, latin, good)) + "{not json\n", encoding="utf-8"
    )
    (in_dir / "broken.json").write_text('{"resourceType": "Bundle", "entry": [', encoding="utf-8")
    with caplog.at_level(logging.ERROR):
        assert deid(in_dir, tmp_path / "out", *surrogate(tmp_path)) == 1
    assert [r["id"] for r in resources(tmp_path / "out" / "mixed.ndjson")] == ["ok1"]
    assert not (tmp_path / "out" / "broken.json").exists()
    messages = "\n".join(record.getMessage() for record in caplog.records)
    assert "line 1 (DocumentReference/pdf1): content0: application/pdf cannot be de-identified" in messages
    assert "line 2 (DocumentReference/lat1): content0: data is not base64 text in utf-8" in messages
    assert "line 4 (not a resource): invalid JSON" in messages
    assert "broken.json: invalid JSON" in messages
    assert "Smith" not in messages and "Grant" not in messages


def test_rerun_skips_finished_files_and_redoes_a_damaged_one(tmp_path, caplog):
    in_dir = tmp_path / "in"
    for number in range(3):
        write_ndjson(
            in_dir / f"part{number}.ndjson",
            document_reference(f"d{number}", f"Patient/p{number}", "John Smith", NOTE_1),
        )
    out = tmp_path / "out"
    assert deid(in_dir, out, *surrogate(tmp_path)) == 0
    first = files(out)
    (out / "part1.ndjson").write_text("{}\n", encoding="utf-8")  # damaged
    with caplog.at_level(logging.INFO):
        assert main(["deid", "--input-format", "fhir", str(in_dir), str(out), *surrogate(tmp_path)]) == 0
    assert "1 written, 2 already done, 0 failed" in caplog.text
    again = files(out)
    for outputs in (first, again):
        outputs.pop("audit/summary.json")
    assert again == first


def test_kill_9_then_resume_gives_the_uninterrupted_outputs(tmp_path):
    in_dir = tmp_path / "in"
    for number in range(12):  # one patient a file, so that each file is a unit of its own
        write_ndjson(
            in_dir / f"part{number:02d}.ndjson",
            document_reference(f"d{number}", f"Patient/p{number}", "John Smith", NOTE_1),
            diagnostic_report(f"r{number}", f"Patient/p{number}", "John Smith", NOTE_2),
        )
    options = [
        "deid",
        "--input-format",
        "fhir",
        "--model",
        "en",
        "--mode",
        "surrogate",
        "--key-file",
        str(tmp_path / "deid.key"),
    ]
    reference = run(FAST_CLI, [*options, str(in_dir), str(tmp_path / "reference")], tmp_path)
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    out = tmp_path / "out"
    kill_9_after(slow_cli(0.1), [*options, str(in_dir), str(out)], tmp_path, lambda: len(list(out.glob("*.ndjson"))), 3)
    assert 3 <= len(list(out.glob("*.ndjson"))) < 12
    resumed = run(FAST_CLI, [*options, str(in_dir), str(out)], tmp_path)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    got, want = files(out), files(tmp_path / "reference")
    for outputs in (got, want):
        summary = json.loads(outputs.pop("audit/summary.json"))
        assert summary.pop("files")["failed"] == 0
        outputs["audit/summary.json"] = json.dumps(summary, sort_keys=True).encode()
    assert got == want
    assert not [p for p in out.rglob("*") if TEMP.fullmatch(p.name)]


def test_reader_names_each_part_and_refuses_the_options_that_do_not_apply(tmp_path):
    in_dir = bundle(tmp_path)
    docs = read_fhir(in_dir / "bundle.json", 10**7)
    assert sorted(doc.name for doc in docs) == sorted(
        [
            "DocumentReference-doc1.elements",
            "DocumentReference-doc1.content0",
            "DocumentReference-doc1.content0.title",
            "DocumentReference-doc1.content1",
            "DocumentReference-doc1.text",
            "DiagnosticReport-rep1.elements",
            "DiagnosticReport-rep1.presentedForm0",
            "DiagnosticReport-rep1.conclusion",
        ]
    )
    elements = next(doc for doc in docs if doc.name == "DocumentReference-doc1.elements")
    assert [(elements.span_text(s), s.label) for s in elements.spans] == [
        ("Smith, John", "PATIENT"),
        ("2023-03-14", "DATE"),
        ("Dr. Alice Grant", "DOCTOR"),
        ("2023-03-14", "DATE"),
    ]
    assert deid(in_dir, tmp_path / "out", "--use-annotations", "--language", "en") == 2
    assert deid(in_dir, tmp_path / "out", "--rename", "hash", *surrogate(tmp_path)) == 2
    assert not (tmp_path / "out").exists()


def test_fhir_input_is_a_folder_and_refuses_the_table_options(tmp_path, caplog):
    """``deid`` also reads table files and databases (``runs.tables``); FHIR input stays a folder run."""
    in_dir = bundle(tmp_path)
    write_ndjson(tmp_path / "one" / "notes.ndjson", document_reference("d9", "Patient/p9", "Jane Roe", NOTE_1))
    with caplog.at_level(logging.ERROR):
        assert deid(tmp_path / "one" / "notes.ndjson", tmp_path / "out", *surrogate(tmp_path)) == 2
        assert deid(in_dir, f"sqlite:///{tmp_path / 'out.db'}", "--output-table", "notes", *surrogate(tmp_path)) == 2
        assert deid(in_dir, tmp_path / "out", "--part-rows", "5", *surrogate(tmp_path)) == 2
    messages = [record.getMessage() for record in caplog.records]
    assert sum("--input-format fhir reads a folder" in message for message in messages) == 2
    assert any(message.startswith("--part-rows: only for a table") for message in messages)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.db").exists()
    assert "Jane Roe" not in caplog.text and "Smith" not in caplog.text
