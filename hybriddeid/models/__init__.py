"""Bundled trained models: ``en/`` (English, the default; tools/train_en_default.py) and ``es/`` (Spanish, MEDDOCAN; tools/train_default.py)."""
