"""``hybriddeid deid --input-format fhir``: FHIR R4 DocumentReference and DiagnosticReport resources
(Bundles, Bulk Data NDJSON) de-identified and written back as resources, on ``runs.deid``.

The run is ``deid.run_deid`` (and so ``batch.run_batch``: the output folder's lock, stop signals,
atomic writes, resume, one audit per note) with this processor. ``hybriddeid.io.fhir`` reads each
resource as notes (attachments, narrative, free-text strings) plus one ``.elements`` document of its own
PHI-bearing elements, and writes the resources back. A patient is a resource's subject: every note of
one subject, across resources and files, is one unit.

A patient's notes go through ``processing.process_notes`` exactly as ``hybriddeid deid`` takes a
patient's notes, so an attachment's de-identified text is byte for byte what ``deid`` writes for the
same text and patient. The elements, whose spans are given (a subject's display is the patient's
name), then go through ``process_notes`` without a model, beside the notes with the spans found in
them: the same key and patient give the same surrogates and the same date shift, and initials in a
display link to names in the text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybriddeid.core.document import Document
from hybriddeid.core.profiles import filter_document
from hybriddeid.io import FHIR_FORMAT
from hybriddeid.io.fhir import INSTALL_HINT, is_elements, part_of, require_models, with_output
from hybriddeid.runs.deid import DeidProcessor
from hybriddeid.runs.processing import NoteSettings, ProcessedNote, process_notes


@dataclass
class FhirDeidProcessor(DeidProcessor):
    """``DeidProcessor`` for FHIR input (``io.fhir``): a resource's subject is its patient, the
    resources' own elements are replaced beside their notes, and resources left out by the reader are
    reported (``rejected``). The model finds the PHI: FHIR holds no annotations to replace, and notes
    are named by their resources, so neither a patient map nor ``--rename`` applies."""

    _rejected: dict[Path, tuple[tuple[str, str, str], ...]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model is None:
            raise ValueError("FHIR resources hold no PHI annotations to replace; leave out --use-annotations")
        if self.renamer is not None:
            raise ValueError("--rename does not apply to FHIR input: notes are named by their resource's type and id")
        if self.patients.mapping is not None or self.patients.pattern:
            raise ValueError("a FHIR resource's patient is its subject; leave out --patient-map and --patient-pattern")
        try:
            require_models()
        except ImportError:
            raise ValueError(INSTALL_HINT) from None

    def unit_key(self, path: Path, doc: Document) -> str:
        """The resource's subject (its reference; a resource without one is a patient of its own).
        Records the resources its file left out, once planning reads it."""
        part = part_of(doc)
        if part.rejected:
            self._rejected[Path(path)] = part.rejected
        return part.patient

    def rejected(self) -> list[tuple[Path, str]]:
        """(file, problem) of every resource left out of its file (``batch.BatchProcessor.rejected``)."""
        return [
            (path, f"{where} ({label}): {problem}")
            for path in sorted(self._rejected)
            for where, label, problem in self._rejected[path]
        ]

    def process_patient(
        self, pipeline: Any, docs: Sequence[Document], settings: NoteSettings, patient: str
    ) -> list[ProcessedNote]:
        """The notes as ``deid`` processes them, then the elements with the same surrogates and dates."""
        assert settings.deid is not None
        notes = [doc for doc in docs if not is_elements(doc)]
        elements = [doc for doc in docs if is_elements(doc)]
        found = process_notes(pipeline, notes, settings, patient)
        if self.phi_set is not None:
            elements = [filter_document(doc, self.phi_set) for doc in elements]
        # the notes beside the elements only for what the patient's surrogates draw on (names, values to avoid)
        together = process_notes(
            None, [note.document for note in found] + elements, NoteSettings(deid=settings.deid), patient
        )
        mode = settings.deid.mode
        return [
            ProcessedNote(
                note.document,
                dataclasses.replace(
                    note.deid,
                    document=with_output(
                        note.deid.document, [(r.start, r.end, r.replacement) for r in note.deid.replacements], mode
                    ),
                ),
            )
            for note in [*found, *together[len(found) :]]
            if note.deid is not None
        ]

    def output_matches(self, doc: Document, written_text: str, audit: Path) -> bool:
        """``DeidProcessor.output_matches`` for notes; a resource's elements are done once their audit
        (made by this run's settings) and its output exist: a date may have been left out there."""
        return is_elements(doc) or super().output_matches(doc, written_text, audit)

    def settings(self) -> dict[str, Any]:
        """``DeidProcessor.settings`` and the input format: FHIR outputs are resources, not notes."""
        return {**super().settings(), "patients": "subject", "input_format": FHIR_FORMAT}
