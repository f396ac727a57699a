"""The DataFrame API on a few synthetic Spanish notes: PHI spans, then surrogates consistent per patient.

    python examples/spark/dataframe_example.py      # needs pip install "hybriddeid[spark]" and Java

Every name, number and address below is invented.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from hybriddeid.integrations.spark import deidentify, find_phi, local_session
from hybriddeid.surrogates import DeidOptions, new_key

NOTES = [
    ("n1", "p1", "Nombre: Lucía Ferrer Montalbán.\nNHC: 4417920.\nFecha de ingreso: 02/09/2024.\n"),
    ("n2", "p1", "Nombre: Lucía Ferrer Montalbán.\nFecha de control: 16/09/2024.\nTeléfono: 923 456 781.\n"),
    ("n3", "p2", "Nombre: Andrés Villalba Quiroga.\nDomicilio: Calle Río Tormes 14, Salamanca.\n"),
]


def main(spark: SparkSession, model: str = "es") -> DataFrame:
    """Find the PHI of the notes, then replace it (n1 and n2 share name, surrogate and date shift)."""
    notes = spark.createDataFrame(NOTES, "note_id string, patient_id string, text string")
    for row in find_phi(notes, model).orderBy("note_id").collect():
        print(row.note_id, [(span.start, span.end, span.label) for span in row.phi_spans])
    # In production read the key with hybriddeid.surrogates.read_key: the same key gives the same surrogates.
    options = DeidOptions(mode="surrogate", language="es", key=new_key())
    deid = deidentify(notes, options, model, patient_col="patient_id").drop("text")  # never write the original
    for row in deid.orderBy("note_id").collect():
        print(f"--- {row.note_id} (error: {row.error})\n{row.deid_text}")
    return deid


if __name__ == "__main__":
    session = local_session("local[2]", "hybriddeid example")
    main(session)
    session.stop()
