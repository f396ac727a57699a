"""The ``[neural]`` config section: every setting, its default, and the papers' values.

Importing this module never imports PyTorch: the pipeline reads the defaults from here (through the
plugin's entry point) to validate configs on machines without the ``[neural]`` extra.
Defaults are sized for a 2-core CPU; the papers' own sizes are noted where they differ.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

ARCHITECTURES = ("bigru", "tsgru", "cedi", "elman", "jordan")
# What "auto" resolves to per architecture (papers 000, 001 and 002; the bi-GRU follows Lample et al.).
ARCHITECTURE_DEFAULTS: dict[str, dict[str, str]] = {
    "bigru": {"output": "crf", "rnn": "gru", "char_encoder": "cnn"},
    "tsgru": {
        "output": "softmax",
        "rnn": "gru",
        "char_encoder": "none",
    },  # 000 "Combine RNN and text skeleton": softmax
    "cedi": {"output": "crf", "rnn": "lstm", "char_encoder": "rnn"},  # 002 §2.5: NeuroNER's char biLSTM and CRF
    # 001 §3.3, Eqs. (10)-(12): a softmax over the hidden layer, words only (no characters). "rnn"
    # only sizes a character RNN should one be asked for; the sentence-level recurrence is the paper's.
    "elman": {"output": "softmax", "rnn": "gru", "char_encoder": "none"},
    "jordan": {"output": "softmax", "rnn": "gru", "char_encoder": "none"},
}
# Settings whose default (0 or "auto") means "the architecture's own value", resolved when the
# settings are made (so a saved model records the value it used). The bi-GRU, TS-GRU and CEDI keep
# the values they had before these became per-architecture; Elman and Jordan take paper 001's
# Table 3 ("Optimal values of hyper-parameters"): hidden layer size 100 (E-RNN) / 150 (J-RNN),
# learning rate 0.01, context window size 11 / 9 words, SGD (§3.5). Table 3's 25 epochs and
# dropout 0.5 are the shared ``epochs`` / ``dropout`` settings (30 / 0.5 by default).
SIZED_BY_ARCHITECTURE: dict[str, dict[str, Any]] = {
    "bigru": {"hidden_dim": 128, "window": 7, "learning_rate": 0.002, "optimizer": "adam"},
    "tsgru": {"hidden_dim": 128, "window": 7, "learning_rate": 0.002, "optimizer": "adam"},
    "cedi": {"hidden_dim": 128, "window": 7, "learning_rate": 0.002, "optimizer": "adam"},
    "elman": {"hidden_dim": 100, "window": 11, "learning_rate": 0.01, "optimizer": "sgd"},
    "jordan": {"hidden_dim": 150, "window": 9, "learning_rate": 0.01, "optimizer": "sgd"},
}
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")  # what ``device`` and ``--device`` accept
# Tagging batches on CUDA when ``predict_batch_tokens`` is 0: padded tokens per batch (a GPU is
# used well only by large batches; a few hundred MEDDOCAN notes at a time).
CUDA_PREDICT_TOKENS = 131_072


def check_device(name: str) -> str:
    """``name`` if it is a device the neural backend accepts ("auto", "cpu", "cuda", "cuda:N"), else a ValueError."""
    if not DEVICE.fullmatch(name):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, not {name!r}")
    return name


CRF_SCANS = ("auto", "steps", "tree")  # how the CRF output takes log Z (``crf_layer.CRF``'s ``scan``)
CRF_VITERBIS = ("auto", "steps", "graph")  # how its Viterbi steps run (``crf_layer.CRF``'s ``viterbi``)
CHOICES = {
    "architecture": ARCHITECTURES,
    "scheme": ("BIO", "BIOES"),
    "output": ("auto", "crf", "softmax"),
    "rnn": ("auto", "gru", "lstm"),
    "char_encoder": ("auto", "cnn", "rnn", "none"),
    "optimizer": ("auto", "adam", "rmsprop", "sgd"),
    "crf_scan": CRF_SCANS,
    "crf_viterbi": CRF_VITERBIS,
}


@dataclass(frozen=True)
class NeuralSettings:
    """One neural tagger's settings (the ``[neural]`` section); validated on construction."""

    architecture: str = "bigru"
    scheme: str = "BIO"
    output: str = "auto"  # "crf" (own torch CRF layer) or "softmax"
    # How the CRF output takes log Z in training: "steps" (one small product per position, cheapest on
    # a CPU), "tree" (log2(T) batched products, for a GPU), "auto" (the tree on CUDA). Same value.
    crf_scan: str = "auto"
    # How its Viterbi steps run when tagging: "steps" (a few kernel launches per position), "graph"
    # (CUDA graphs of 64 steps replayed: the same operations, a GPU only), "auto" (graphs on CUDA). Same paths.
    crf_viterbi: str = "auto"
    rnn: str = "auto"  # "gru" or "lstm"
    # Token representation.
    word_dim: int = 100  # TS-GRU paper: 150; CEDI: 100; Elman/Jordan (001 Table 4): 100 random, 80 RNNLM, 300 CBOW
    min_word_count: int = 1
    singleton_unk: float = 0.3  # chance a training word seen once is shown as <UNK> (learns an OOV vector)
    char_encoder: str = "auto"  # "cnn", "rnn" (biGRU/biLSTM over characters) or "none"
    char_dim: int = 25
    char_hidden: int = 50  # CNN filters, or the char RNN's size per direction (CEDI: 25)
    max_word_length: int = 20
    # Word clusters made by `hybriddeid resources clusters` (as the CRFs use them): each token's Brown
    # prefixes and word2vec cluster ids, embedded and summed; stands in for the papers' pretrained
    # embeddings. "" = none; the folder is copied into the saved model.
    clusters: str = ""
    cluster_dim: int = 50
    # Sentence-level RNN per direction; 0 = the architecture's (SIZED_BY_ARCHITECTURE): 128 for the
    # bi-GRU, TS-GRU and CEDI (papers: TS-GRU 150, CEDI 100), Elman 100 and Jordan 150 (001 Table 3).
    hidden_dim: int = 0
    dropout: float = 0.5
    # TS-GRU (paper 000): skeleton vocabulary ratio r (Eq. 4) and context window.
    skeleton_ratio: float = 0.1  # paper: 0.25 i2b2 2006, 0.1 i2b2 2014, 0.14 Chinese
    # Tokens in the window centred on each token; 0 = the architecture's: TS-GRU 7 (paper 000);
    # Elman 11 and Jordan 9 (001 Table 3 "context window size"), whose input is the window's word
    # vectors concatenated (001 Eq. 5), zero-padded at the note's edges.
    window: int = 0
    # CEDI (paper 002): n-gram context, deep prefixes, attention (§2.6).
    ngram: int = 10
    context_dim: int = 64  # paper: 256 (per direction)
    prefix_length: int = 3
    prefix_min_count: int = 20
    prefix_dim: int = 25
    # Deep suffixes beside the prefixes (002 §2.2, after Yadav et al.): the last ``prefix_length``
    # characters, lower-cased, kept when seen ``prefix_min_count`` times, embedded in ``prefix_dim``.
    # Off as in the paper's final system: "prefix features increased the overall de-identification
    # performance, but suffixes did not. Therefore, we only included the prefix features" (§2.5).
    suffixes: bool = False
    attention_dim: int = 50
    # Training.
    # Elman and Jordan (paper 001) are unidirectional, as its Eqs. (7) and (12) are (h(t - 1) and
    # P(y(t - 1)) only); the right-hand context comes from the word-context window. Reported on its
    # i2b2 2014 split (Table 5, overall R / P / F): E-RNN 88.90 / 89.55 / 89.22, J-RNN 89.63 / 90.73 /
    # 90.18, its CRF baseline 79.74 / 83.11 / 81.39 (E-RNN with CBOW embeddings; Table 4: random
    # vectors F 86.32, RNNLM 87.76, CBOW 89.44).
    optimizer: str = "auto"  # "auto" = the architecture's: Adam; SGD for Elman and Jordan (001 §3.5)
    learning_rate: float = 0.0  # 0 = the architecture's: 0.002; 0.01 for Elman and Jordan (001 Table 3)
    # Notes per training batch. Small on purpose: on a CPU an epoch with 2 notes per batch takes only
    # somewhat longer than with 8 (the window RNNs and the CRF batch over tokens, not notes) but makes
    # four times the updates, so the held-out F1 peaks in far fewer epochs (docs/explanation/neural-results.md).
    # On a GPU, larger batches use the device better.
    batch_size: int = 2
    # Training batches by tokens instead: when > 0, length-bucketed batches take notes while their
    # padded size (notes x longest note) stays within this many tokens (at least one note each);
    # batch_size is then unused. For a GPU (fewer, larger updates per epoch: see docs/how-to/neural.md).
    batch_tokens: int = 0
    predict_batch_size: int = 16  # notes per batch when tagging on the CPU (no gradients, so larger is cheaper)
    # Tagging batches by padded tokens; 0 = predict_batch_size notes on the CPU, CUDA_PREDICT_TOKENS on CUDA.
    predict_batch_tokens: int = 0
    epochs: int = 30
    patience: int = 3  # epochs without a better held-out F1 before stopping
    dev_fraction: float = 0.1  # training notes held out for early stopping
    max_train_minutes: float = 0.0  # no epoch starts that would end past it (at the last epoch's pace); 0 = none
    grad_clip: float = 5.0
    seed: int = 13
    # Hardware.
    # Where it trains, and where it tags unless the loader chooses (Pipeline.load(device=...),
    # --device): "auto" (CUDA when available), "cpu", "cuda", "cuda:1". A saved model whose config
    # names a CUDA device this machine lacks tags on the CPU (with a warning).
    device: str = "auto"
    mixed_precision: bool = True  # training on CUDA only (bfloat16 where supported); the CPU always trains in float32
    # Tagging in bfloat16 on CUDA: faster, but it moved 2-7 spans of 250 MEDDOCAN notes against float32
    # (issue 25), so tagging stays in float32 unless this is set.
    tag_mixed_precision: bool = False
    num_threads: int = 0  # torch CPU threads; 0 = torch's default (1 in a worker forked after several ran)
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"[neural] architecture must be one of {list(ARCHITECTURES)}, not {self.architecture!r}")
        for key, value in SIZED_BY_ARCHITECTURE[self.architecture].items():
            if getattr(self, key) in (0, "auto"):  # frozen: the resolved value replaces the placeholder
                object.__setattr__(self, key, value)
        for key, allowed in CHOICES.items():
            if getattr(self, key) not in allowed:
                raise ValueError(f"[neural] {key} must be one of {list(allowed)}, not {getattr(self, key)!r}")
        if self.window < 1 or self.window % 2 == 0:
            raise ValueError("[neural] window must be an odd number (a token and the same context on each side)")
        if not 0.0 < self.skeleton_ratio < 1.0:
            raise ValueError("[neural] skeleton_ratio must lie in (0, 1) (paper 000, Eq. 4)")
        if (
            min(self.ngram, self.batch_size, self.predict_batch_size, self.epochs, self.hidden_dim) < 1
            or self.learning_rate <= 0
        ):
            raise ValueError(
                "[neural] ngram, batch_size, predict_batch_size, epochs, hidden_dim and learning_rate must be positive"
            )
        if min(self.batch_tokens, self.predict_batch_tokens, self.num_threads) < 0:
            raise ValueError("[neural] batch_tokens, predict_batch_tokens and num_threads must be 0 or more")
        try:
            check_device(self.device)
        except ValueError as exc:
            raise ValueError(f"[neural] {exc}") from None
        if not 0.0 <= self.dev_fraction < 1.0 or not 0.0 <= self.dropout < 1.0:
            raise ValueError("[neural] dev_fraction and dropout must lie in [0, 1)")

    def resolved(self, key: str) -> str:
        """``output``, ``rnn`` or ``char_encoder`` with "auto" replaced by the architecture's choice."""
        value = getattr(self, key)
        return ARCHITECTURE_DEFAULTS[self.architecture][key] if value == "auto" else value

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The section's defaults as written (0 / "auto" where the architecture decides), not one
# architecture's resolved values: a pipeline passes every key, so a resolved default would stick.
NEURAL_DEFAULTS: dict[str, Any] = {setting.name: setting.default for setting in fields(NeuralSettings)}
