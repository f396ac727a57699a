"""Layer 4, runs: a pipeline over notes. One patient's notes (``processing.process_notes``, which every
run calls), folders of notes in forked workers (``batch``), de-identification of folders (``deid``),
tables and databases (``tables``) and FHIR resources (``fhir``), keyed output names (``renaming``)
and a run's HTML report (``report``).
"""
