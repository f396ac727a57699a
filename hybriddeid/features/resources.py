"""Token tags and word-class features from resources made outside the labelled notes: word
clusters (Brown paths, word2vec k-means ids) and gazetteers (dictionary BIOES tags).

Both CRFs use them: the token CRF as features of a token and its neighbours, the character CRF
projected onto each token's edge characters (paper section 3.2.3). Every feature string is built
once per word and memoised, so a note costs dictionary lookups, not string building.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybriddeid.core.cache import read_once
from hybriddeid.features.gazetteer import Gazetteer, keys_of_words
from hybriddeid.knowledge.clusters import DEFAULT_PREFIX_LENGTHS, WordClusters, normalize_word, path_prefixes
from hybriddeid.text.tokenize import Token

NEIGHBOUR_PREFIX = 6  # the Brown prefix length neighbours and the character CRF see


class ClusterFeatures:
    """Memoised cluster feature strings of a word: its own, as a neighbour, and as projected."""

    def __init__(self, clusters: WordClusters, prefix_lengths: Sequence[int] = DEFAULT_PREFIX_LENGTHS) -> None:
        self.clusters = clusters
        self.prefix_lengths = tuple(prefix_lengths)
        self._memo: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {}
        # the strings depend on a word's Brown path and word2vec ids only: built once per path and id
        self._by_path: dict[str | None, tuple[tuple[str, ...], str, str]] = {}
        self._by_id: dict[tuple[int, int], str] = {}
        # the projected word2vec id: the middle k, fine enough to tell names from places
        ks = clusters.w2v_ks
        self._projected_k = ks[len(ks) // 2] if ks else None

    @classmethod
    def of(cls, clusters: WordClusters, prefix_lengths: Sequence[int] = DEFAULT_PREFIX_LENGTHS) -> ClusterFeatures:
        """The features of ``clusters`` that another reader of the same clusters object already made,
        while it is in use: a model's token and character CRFs share one memo."""
        lengths = tuple(prefix_lengths)
        return read_once(cls, f"{id(clusters)}:{lengths}".encode(), lambda: cls(clusters, lengths))

    def _entry(self, word: str) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
        entry = self._memo.get(word)
        if entry is None:
            key = normalize_word(word)
            found = self.clusters.brown.get(key)
            path = found[0] if found is not None else None
            by_path = self._by_path.get(path)
            if by_path is None:
                by_path = self._by_path[path] = self._path_strings(path)
            brown, near, projected_brown = by_path
            ids = self.clusters.w2v_ids_of_key(key)
            by_id = self._by_id
            own = brown + tuple(by_id.get(pair) or by_id.setdefault(pair, f"wv{pair[0]}={pair[1]}") for pair in ids)
            projected = (
                projected_brown,
                "twv=" + next((str(cluster) for k, cluster in ids if k == self._projected_k), "none"),
            )
            entry = (own or ("bc=none",), near, projected)
            if len(self._memo) < 1 << 18:
                self._memo[word] = entry
        return entry

    def _path_strings(self, path: str | None) -> tuple[tuple[str, ...], str, str]:
        """A Brown path's own prefix strings, the prefix a neighbour shows, and ``tbc=`` of it."""
        if path is None:
            return (), "none", "tbc=none"
        lengths = self.prefix_lengths
        prefixes = path_prefixes(path, lengths)
        near = prefixes[lengths.index(NEIGHBOUR_PREFIX) if NEIGHBOUR_PREFIX in lengths else 0] if prefixes else "none"
        return tuple(f"bc{n}={p}" for n, p in zip(lengths, prefixes)), near, "tbc=" + near

    def own(self, word: str) -> tuple[str, ...]:
        """Brown prefixes at every length and the word2vec id at every k ("bc4=0110", "wv200=17")."""
        return self._entry(word)[0]

    def neighbour(self, word: str) -> str:
        """The Brown prefix a neighbouring token shows ("none" for an unknown word)."""
        return self._entry(word)[1]

    def projected(self, word: str) -> tuple[str, ...]:
        """What the character CRF's edge characters learn of their token's clusters."""
        return self._entry(word)[2]


def case_mark(first_word: str) -> str:
    """What marks a dictionary hit's tags when its first word is not capitalised (":lc"), else "":
    matching ignores case, but "león" in running text is rarely the city that "León" is."""
    return "" if first_word[:1].isupper() else ":lc"


def case_marked(tags: list[str], tokens: Sequence[Token]) -> list[str]:
    """Dictionary tags with every hit ``case_mark`` marks marked ("S-CITY" -> "S-CITY:lc")."""
    out = tags
    for i, tag in enumerate(tags):
        mark = case_mark(tokens[i].text) if tag[0] in "BS" else ""
        if mark:
            if out is tags:
                out = list(tags)
            out[i] = tag + mark
            j = i + 1
            while j < len(tags) and tags[j][0] in "IE":
                out[j] = tags[j] + mark
                j += 1
    return out


def dictionary_tags(
    gazetteers: Mapping[str, Gazetteer],
    tokens: Sequence[Token],
    lowers: Sequence[str],
    word_keys: Sequence[str] | None = None,
) -> dict[str, list[str]]:
    """Per gazetteer group, the case-marked BIOES tags of a line's tokens ("gaz_names": [...]);
    ``word_keys``: ``keys_of_words(lowers)``, if the caller has them."""
    if word_keys is None:
        word_keys = keys_of_words(lowers)
    tags: dict[str, list[str]] = {}
    for group, gazetteer in gazetteers.items():
        tags["gaz_" + group] = case_marked(gazetteer.tag(lowers, word_keys), tokens)
    return tags


# Dictionary kinds matched together: one tag per group keeps the feature count down, and the
# tag's label still says which kind matched ("B-first_names"). Kinds not listed form their own group.
GAZETTEER_GROUPS: dict[str, tuple[str, ...]] = {
    "names": ("first_names", "last_names"),
    "places": ("cities", "towns", "states", "countries", "postal_codes"),
    "organizations": ("hospitals", "health_organizations", "employers"),
    "professions": ("professions",),
}
ALL_KINDS = "*"


def grouped_gazetteers(language: str, kinds: Sequence[str], extra_files: Sequence[str] = ()) -> dict[str, Gazetteer]:
    """group -> one matcher over the chosen dictionary kinds (``"*"``: every bundled kind) and
    the user's own lists (``extra_files``, one kind per file named by its stem)."""
    from hybriddeid.knowledge.dictionaries import load_gazetteers

    if not kinds and not extra_files:
        return {}
    by_kind = load_gazetteers(language, None if ALL_KINDS in kinds else kinds, extra_files)
    groups: dict[str, Gazetteer] = {}
    placed: set[str] = set()
    for group, members in GAZETTEER_GROUPS.items():
        present = [by_kind[kind] for kind in members if kind in by_kind]
        if present:
            groups[group] = Gazetteer.union(present)
            placed.update(members)
    for kind, gazetteer in by_kind.items():
        if kind not in placed:
            groups[kind] = gazetteer
    return dict(sorted(groups.items()))  # the order a saved model reloads them in (by file name)
