"""The bundled default model loads from the installed package and finds PHI in an example note."""
from __future__ import annotations

from pathlib import Path

from hybriddeid import Pipeline

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "notes" / "caso_001.txt"


def test_bundled_model_finds_header_and_narrative_phi():
    pipeline = Pipeline.load()
    assert pipeline.language == "es"
    assert pipeline.meta["attribution"]["license"].startswith("CC-BY 4.0")
    text = EXAMPLE.read_text(encoding="utf-8")
    found = {(text[s.start:s.end], s.label) for s in pipeline.predict(text)}
    assert ("4417920", "ID_SUJETO_ASISTENCIA") in found
    assert ("Ferrer Montalbán", "NOMBRE_SUJETO_ASISTENCIA") in found
    assert ("avillalba@saludcyl.es", "CORREO_ELECTRONICO") in found
    assert any(label == "FECHAS" and surface == "03/09/2024" for surface, label in found)  # in the narrative
