"""Recipes (tuned pipeline configs shipped with the package) and the config ``hybriddeid train`` uses.

A recipe is a TOML pipeline config in ``resources/recipes/<name>.toml`` (package data, so an installed
package has them): ``meddocan`` (Spanish, tuned on MEDDOCAN, the bundled ``es`` model's) and
``en-default`` (the bundled English model's). :func:`training_config` puts together what ``train``
trains: the library defaults, then the recipe, then the user's config file (a key the config file
sets wins over the recipe's), then ``--language``; with none of those naming a language it is
detected from the training text (:func:`hybriddeid.core.languages.detect_language`). A recipe's
``clusters = "<name>"`` means word clusters built from the training text (plus any extra unlabelled
folders); they are built once into a cache folder keyed by that text and reused.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import shutil
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybriddeid.core.cache import cache_dir
from hybriddeid.core.languages import detect_language, language_pack, shared_resource
from hybriddeid.pipeline.core import build_config, config_overrides

log = logging.getLogger("hybriddeid")

RECIPE_SUFFIX = ".toml"
CLUSTERS_VERSION = "1"  # part of the cache key: bump when build_clusters' defaults change


def recipe_names() -> tuple[str, ...]:
    """The names of the shipped recipes, sorted."""
    folder = shared_resource("recipes")
    if not folder.is_dir():
        return ()
    return tuple(
        sorted(entry.name[: -len(RECIPE_SUFFIX)] for entry in folder.iterdir() if entry.name.endswith(RECIPE_SUFFIX))
    )


def recipe_overrides(name: str) -> dict[str, Any]:
    """What recipe ``name`` sets (not completed with the defaults); ValueError listing the recipes
    when there is none of that name."""
    names = recipe_names()
    if name not in names:
        raise ValueError(f"unknown recipe {name!r}; shipped recipes: {', '.join(names) or 'none'}")
    text = shared_resource("recipes", name + RECIPE_SUFFIX).read_text(encoding="utf-8")
    return tomllib.loads(text)


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top``'s keys set over it, section by section."""
    merged = copy.deepcopy(dict(base))
    for section, values in top.items():
        if isinstance(values, Mapping) and isinstance(merged.get(section), Mapping):
            merged[section] = {**merged[section], **copy.deepcopy(dict(values))}
        else:
            merged[section] = copy.deepcopy(values)
    return merged


def training_config(
    texts: Sequence[str],
    recipe: str | None = None,
    config_path: Path | None = None,
    language: str | None = None,
    cluster_folders: Sequence[Path] = (),
    cache: Path | None = None,
) -> dict[str, Any]:
    """The full pipeline config to train on notes whose text is ``texts``.

    Layers, each over the one before: the defaults, ``recipe``, the file ``config_path``,
    ``language``. Without a language from any of them it is detected from ``texts`` (and the default
    kept, with a warning, when no pack fits). Clusters a recipe names by a bare name are built from
    the notes of ``cluster_folders`` (the training folder first, then extra unlabelled ones) into
    ``cache`` (default :func:`cache_dir`), once per distinct text. Decisions are logged, never text.
    """
    overrides: dict[str, Any] = {}
    from_recipe: dict[str, Any] = {}
    if recipe:
        from_recipe = recipe_overrides(recipe)
        overrides = _merge(overrides, from_recipe)
    from_file = config_overrides(config_path) if config_path else {}
    overrides = _merge(overrides, from_file)
    pipeline_section = overrides.setdefault("pipeline", {})
    guess = detect_language(texts)
    if language:
        source = "--language"
        pipeline_section["language"] = language
    elif "language" in from_file.get("pipeline", {}):
        source = f"the config {config_path}"
    elif "language" in from_recipe.get("pipeline", {}):
        source = f"the recipe {recipe!r}"
    elif guess.code is not None:
        source = "detected from the training text"
        pipeline_section["language"] = guess.code
    else:
        source = "the default: no language pack's stop words fit the training text"
    origin = str(config_path) if config_path else f"recipe {recipe!r}" if recipe else "defaults"
    config = build_config(overrides, origin=origin)
    chosen = config["pipeline"]["language"]
    language_pack(chosen)  # an unknown code fails now, naming the available ones
    level = logging.WARNING if source.startswith("the default") else logging.INFO
    log.log(level, "language %s (%s; %s)", chosen, source, guess.reason())
    if guess.code is not None and guess.code != chosen:
        log.warning(
            "the training text looks like language %s, but the pipeline is set to %s (%s)", guess.code, chosen, source
        )
    _build_recipe_clusters(config, from_recipe, from_file, cluster_folders, chosen, cache)
    return config


def _build_recipe_clusters(
    config: dict[str, Any],
    from_recipe: Mapping[str, Any],
    from_file: Mapping[str, Any],
    folders: Sequence[Path],
    language: str,
    cache: Path | None,
) -> None:
    """Point every section whose clusters come from the recipe (a bare name) at clusters built
    from ``folders``' text, building them into the cache unless already there."""
    sections = [
        name
        for name, values in from_recipe.items()
        if isinstance(values, Mapping) and values.get("clusters") and "clusters" not in from_file.get(name, {})
    ]
    if not sections:
        return
    if not folders:
        raise ValueError(
            f"the recipe's sections {sections} name word clusters, built from the training notes: "
            "give the folders of notes to build them from"
        )
    from hybriddeid.knowledge.build import build_clusters, note_sequences, read_texts

    texts = read_texts(list(folders))
    digest = hashlib.sha256(f"{CLUSTERS_VERSION}\0{language}\0".encode())
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())
    folder = (cache or cache_dir()) / "clusters" / f"{language}-{digest.hexdigest()[:16]}"
    if (folder / "meta.json").is_file():  # written last: the folder is whole
        log.info("word clusters: reusing %s (built earlier from the same %d notes)", folder, len(texts))
    else:
        log.info(
            "word clusters: building from the text of %d notes in %s into %s",
            len(texts),
            ", ".join(str(f) for f in folders),
            folder,
        )
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        build_clusters(note_sequences(texts), language).to_disk(tmp)
        try:
            os.replace(tmp, folder)  # whole or absent, if two runs build at once
        except OSError:
            if not (folder / "meta.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another run built the same clusters first
    for name in sections:
        config[name]["clusters"] = str(folder)
