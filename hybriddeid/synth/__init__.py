"""Synthetic clinical notes with exact PHI offsets (``hybriddeid synth``), for training without real notes."""

from hybriddeid.synth.generator import MIXES, check_offsets, generate_corpus, generate_note, load_synth_resources

__all__ = ["MIXES", "check_offsets", "generate_corpus", "generate_note", "load_synth_resources"]
