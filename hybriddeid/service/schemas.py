"""The JSON bodies of ``hybriddeid serve`` (pydantic models): requests are checked against them in the
worker process, and the OpenAPI document is drawn from them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hybriddeid.core.document import Span
from hybriddeid.core.profiles import PHI_SETS
from hybriddeid.surrogates.deid import Replacement

PhiSet = Literal[PHI_SETS]  # type: ignore[valid-type]  # the names from profiles at run time, kept in one place
Mode = Literal["tag", "mask", "surrogate"]


class Note(BaseModel):
    """One note of a batch."""

    model_config = ConfigDict(extra="forbid")
    # default= by keyword: type checkers read a positional default of Field as a required field
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the note's id, echoed in the answer (default: its position, from 0)",
    )
    text: str = Field(description="the note's text")
    patient: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="deid: the note's patient (default: the request's patient, else "
        "the note's id, as batch runs take the file name)",
    )


class AnnotateRequest(BaseModel):
    """One note (``text``) or a batch (``notes``), and how PHI is found."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = Field(None, description='one note (its id is "0")')
    notes: list[Note] | None = Field(None, description="a batch of notes")
    phi_set: PhiSet | None = Field(None, description="keep only this PHI set's spans (default: the model's)")
    threshold: float | None = Field(
        None, ge=0, le=1, description="P(O) threshold in (0, 1]; 0: none (default: the model's config)"
    )

    @model_validator(mode="after")
    def _one_of(self) -> AnnotateRequest:
        if (self.text is None) == (self.notes is None):
            raise ValueError("give either text (one note) or notes (a batch), not both")
        return self

    def all_notes(self) -> list[Note]:
        """The notes with their ids (a note without one is named by its position)."""
        notes = [Note(text=self.text)] if self.text is not None else list(self.notes or [])
        return [note if note.id is not None else note.model_copy(update={"id": str(i)}) for i, note in enumerate(notes)]


class DeidRequest(AnnotateRequest):
    """Notes to de-identify, and how."""

    mode: Mode | None = Field(None, description="tag, mask or surrogate (default: the server's --mode)")
    patient: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="the patient of every note without its own (surrogates and date "
        "shifts are consistent per patient, across requests)",
    )


class AnnotatedNote(BaseModel):
    id: str
    spans: list[Span] = Field(description="PHI spans at the note's offsets (code points)")


class AnnotateResponse(BaseModel):
    notes: list[AnnotatedNote]


class DeidentifiedNote(BaseModel):
    id: str
    patient: str
    text: str = Field(description="the de-identified text")
    spans: list[Span] = Field(description="the replaced spans at the output's offsets")
    replacements: list[Replacement] = Field(description="what replaced what, as the audit has it (no original text)")
    unread_characters: int = Field(description="characters in scripts the model does not read (kept or masked)")


class DeidResponse(BaseModel):
    notes: list[DeidentifiedNote]


# Every field name a request may hold: a 422's ``loc`` names these and positions, and nothing a client
# made up (an unknown key may hold note text).
REQUEST_FIELDS = frozenset(name for model in (Note, AnnotateRequest, DeidRequest) for name in model.model_fields)


class ErrorResponse(BaseModel):
    error: str = Field(
        description="the kind: unauthorized, forbidden, rate_limited, too_large, invalid, timeout, "
        "worker_failed, overloaded, internal"
    )
    message: str = Field(description="what is wrong, never quoting note text")
    error_id: str | None = Field(None, description="for 500s and 504s: the id the server's log gives the failure")
    details: list[dict] | None = Field(
        None, description="422: each invalid field (location, message, type); an unknown field's name is never repeated"
    )
