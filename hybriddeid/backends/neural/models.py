"""The PyTorch architectures, each mapping a padded batch of whole notes to tag scores.

- ``BiRNNTagger``: word embeddings + a character CNN or bi-RNN, a bi-GRU/bi-LSTM over the note, and
  a CRF or softmax output (the Lample et al. tagger both papers start from).
- ``TSGRU``: paper 000's two-branch model ("Combine RNN and text skeleton", Fig. 4): the original
  text and its skeleton each through their own embedding and bi-GRU, read in a window of
  ``window`` tokens centred on the token to label ("Parameters of the model": window 7).
- ``CEDI``: paper 002 (§2.1-2.3, Fig. 2): character, token and deep-prefix embeddings plus forward
  and backward n-gram context embeddings, a bi-LSTM over the concatenation, and additive attention
  over the concatenated embeddings of the token's 2n + 1 window, merged into the output; deep
  suffixes beside the prefixes when ``suffixes`` is on.
- ``Elman`` and ``Jordan``: paper 001's recurrent networks (§3.3, Fig. 1) over its word-context
  window input (Eq. 5: the embeddings of the ``window`` words centred on the token, concatenated):
  Elman's hidden layer feeds back its previous state (Eq. 7), Jordan's the previous token's output
  posteriors P(y(t - 1)) (Eq. 12); both forward only, with a softmax output (Eqs. 10-11).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hybriddeid.backends.neural.crf_layer import CRF
from hybriddeid.backends.neural.encoding import PAD_ID, EncodedNote, PreparedNote, Vocabularies, id_arrays
from hybriddeid.backends.neural.settings import NeuralSettings

_MASKED = -1e4  # attention score of padding (finite, so half precision stays NaN-free)


@dataclass
class NoteTensors:
    """One encoded note as tensors ([T] per feature, [T, L] for several ids per token), made once."""

    features: dict[str, torch.Tensor]
    tags: torch.Tensor | None
    length: int

    @classmethod
    def of(cls, note: EncodedNote) -> NoteTensors:
        features = {name: torch.from_numpy(array) for name, array in id_arrays(note).items()}
        tags = torch.tensor(note.tags, dtype=torch.long) if note.tags is not None else None
        return cls(features, tags, len(note))

    def to(self, device: torch.device) -> NoteTensors:
        """The same note with its tensors on ``device`` (training notes go to a GPU once)."""
        return NoteTensors(
            {name: values.to(device) for name, values in self.features.items()},
            None if self.tags is None else self.tags.to(device),
            self.length,
        )


@dataclass
class Batch:
    """Padded tensors for a batch of notes; ``mask`` marks real sequence positions."""

    features: dict[
        str, torch.Tensor
    ]  # "words", "skeleton", "prefixes", "suffixes": [B, T]; "chars", "clusters": [B, T, L]
    mask: torch.Tensor  # [B, T] bool
    lengths: torch.Tensor  # [B], on the CPU
    tags: torch.Tensor | None = None  # [B, T]

    @classmethod
    def collate(cls, notes: list[NoteTensors], device: torch.device) -> Batch:
        """The notes padded into one batch on ``device`` (the model's): built where the notes' tensors
        are, then copied (from pinned memory, without waiting, when the notes are on the CPU and
        ``device`` is a GPU)."""
        source = notes[0].features["words"].device
        lengths = torch.tensor([note.length for note in notes])
        width = int(lengths.max())

        def moved(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.device == device:
                return tensor
            if device.type == "cuda" and tensor.device.type == "cpu":
                return tensor.pin_memory().to(device, non_blocking=True)
            return tensor.to(device)

        features: dict[str, torch.Tensor] = {}
        for name, first in notes[0].features.items():
            depth = (max(note.features[name].size(1) for note in notes),) if first.dim() == 2 else ()
            tensor = torch.full((len(notes), width, *depth), PAD_ID, dtype=torch.long, device=source)
            for b, note in enumerate(notes):
                values = note.features[name]
                if values.dim() == 2:
                    tensor[b, : note.length, : values.size(1)] = values
                else:
                    tensor[b, : note.length] = values
            features[name] = moved(tensor)
        mask = moved(torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1))
        tags: torch.Tensor | None = None
        if notes[0].tags is not None:
            tags = torch.zeros((len(notes), width), dtype=torch.long, device=source)
            for b, note in enumerate(notes):
                if note.tags is None:
                    raise ValueError("a batch mixes notes with and without gold tags")
                tags[b, : note.length] = note.tags
            tags = moved(tags)
        return cls(features, mask, lengths, tags)

    @classmethod
    def padded(cls, notes: list[PreparedNote], device: torch.device) -> Batch:
        """Prepared notes (id arrays, made by any process) padded into one batch on ``device``: the
        padding is done in numpy, and each feature crosses to the device in one copy."""
        lengths = np.array([note.length for note in notes], dtype=np.int64)
        width = int(lengths.max())
        features: dict[str, torch.Tensor] = {}
        for name, first in notes[0].features.items():
            depth = (max(note.features[name].shape[1] for note in notes),) if first.ndim == 2 else ()
            array = np.full((len(notes), width, *depth), PAD_ID, dtype=np.int64)
            for b, note in enumerate(notes):
                values = note.features[name]
                if values.ndim == 2:
                    array[b, : note.length, : values.shape[1]] = values
                else:
                    array[b, : note.length] = values
            features[name] = _to_device(torch.from_numpy(array), device)
        mask = np.arange(width)[None, :] < lengths[:, None]
        return cls(features, _to_device(torch.from_numpy(mask), device), torch.from_numpy(lengths))


def _to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the CPU) on ``device``: from pinned memory, without waiting, to a GPU."""
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def _windows(x: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """For each position t of ``x`` ([B, T] or [B, T, D]), x[t - before .. t + after], zero-padded at
    the note's edges: [B, T, W] or [B, T, W, D]."""
    size = before + after + 1
    padding = (before, after) if x.dim() == 2 else (0, 0, before, after)
    windows = nn.functional.pad(x, padding).unfold(1, size, 1)  # window is the last dim
    return windows if x.dim() == 2 else windows.movedim(-1, 2)


def centered_windows(x: torch.Tensor, size: int) -> torch.Tensor:
    """The ``size`` positions centred on each position (TS-GRU's context window, paper 000)."""
    return _windows(x, size // 2, size // 2)


def ngram_windows(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CEDI's n-grams (paper 002 §2.1): forward (x[t-n], ..., x[t-1], x[t]) and backward
    (x[t+n], ..., x[t+1], x[t]), each ending on the token itself, across line and sentence ends."""
    around = _windows(x, n, n)
    return around[:, :, : n + 1], around[:, :, n:].flip(2)


def recurrent(kind: str, input_size: int, hidden_size: int, bidirectional: bool = True) -> nn.RNNBase:
    """A GRU or LSTM (batch first); an LSTM's forget gates start open (bias 1), so it learns sooner."""
    if kind != "lstm":
        return nn.GRU(input_size, hidden_size, batch_first=True, bidirectional=bidirectional)
    lstm = nn.LSTM(input_size, hidden_size, batch_first=True, bidirectional=bidirectional)
    with torch.no_grad():
        for name, bias in lstm.named_parameters():
            if name.startswith("bias_ih"):  # gate order: input, forget, cell, output
                bias[hidden_size : 2 * hidden_size].fill_(1.0)
    return lstm


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each sequence of ``x`` [B, T, D] reversed within its own length; padding stays in place."""
    positions = torch.arange(x.size(1), device=x.device).unsqueeze(0)
    lengths = lengths.to(x.device).unsqueeze(1)
    index = torch.where(positions < lengths, lengths - 1 - positions, positions)
    return x.gather(1, index.unsqueeze(2).expand_as(x))


class SequenceEncoder(nn.Module):
    """A bidirectional RNN over padded sequences: a forward RNN, and a second one over each sequence
    reversed within its length. Same result as a packed bidirectional RNN, and several times
    faster to train on the CPU, where packed GRU gradients are slow."""

    def __init__(self, kind: str, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.forward_rnn = recurrent(kind, input_size, hidden_size, bidirectional=False)
        self.backward_rnn = recurrent(kind, input_size, hidden_size, bidirectional=False)
        self.output_size = 2 * hidden_size

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        forward_states, _ = self.forward_rnn(x)
        backward_states, _ = self.backward_rnn(reverse_padded(x, lengths))
        return torch.cat([forward_states, reverse_padded(backward_states, lengths)], dim=2)


class WindowEncoder(nn.Module):
    """For each real token, a forward RNN's last output over (x[t-n], ..., x[t]) and a backward RNN's
    over (x[t+n], ..., x[t]): CEDI's n-gram context embedding (paper 002 §2.1). It is also exactly
    the centre output of a bi-RNN run over the 2n + 1 window around the token (TS-GRU's window),
    computed with n + 1 steps per direction instead of 2n + 1."""

    def __init__(self, kind: str, input_size: int, hidden_size: int, n: int) -> None:
        super().__init__()
        self.n = n
        self.forward_rnn = recurrent(kind, input_size, hidden_size, bidirectional=False)
        self.backward_rnn = recurrent(kind, input_size, hidden_size, bidirectional=False)
        self.output_size = 2 * hidden_size

    def forward(self, vectors: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``vectors`` [B, T, D] -> [B, T, 2 * hidden] (zeros on padding)."""
        forward, backward = ngram_windows(vectors, self.n)
        last = torch.cat(
            [self.forward_rnn(forward[mask])[0][:, -1], self.backward_rnn(backward[mask])[0][:, -1]], dim=1
        )
        out = last.new_zeros((*mask.shape, last.size(1)))
        out[mask] = last
        return out


class CharEncoder(nn.Module):
    """A token's vector from its characters: max-pooled CNN filters, or a bi-RNN's final states."""

    def __init__(self, kind: str, rnn: str, num_chars: int, char_dim: int, hidden: int) -> None:
        super().__init__()
        self.kind = kind
        self.embedding = nn.Embedding(num_chars, char_dim, padding_idx=PAD_ID)
        if kind == "cnn":
            self.conv = nn.Conv1d(char_dim, hidden, kernel_size=3, padding=1)
            self.output_size = hidden
        else:
            self.rnn = SequenceEncoder(rnn, char_dim, hidden)
            self.output_size = 2 * hidden

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """``chars`` [N, L] -> [N, output_size]."""
        present = chars != PAD_ID
        vectors = self.embedding(chars)
        if self.kind == "cnn":
            filtered = self.conv(vectors.transpose(1, 2)).transpose(1, 2)
            return filtered.masked_fill(~present.unsqueeze(2), _MASKED).max(dim=1).values
        lengths = present.sum(1).clamp(min=1)
        states = self.rnn(vectors, lengths)
        half = states.size(2) // 2  # final states: forward at the last character, backward at the first
        last = states[torch.arange(states.size(0), device=states.device), lengths - 1, :half]
        return torch.cat([last, states[:, 0, half:]], dim=1)


class TaggerModel(nn.Module):
    """Shared output layer: ``emissions`` (per architecture) scored by a CRF or a softmax."""

    def __init__(self, settings: NeuralSettings, vocabularies: Vocabularies) -> None:
        super().__init__()
        self.num_tags = len(vocabularies.tags)
        self.dropout = nn.Dropout(settings.dropout)
        self.crf = (
            CRF(self.num_tags, settings.crf_scan, settings.crf_viterbi)
            if settings.resolved("output") == "crf"
            else None
        )
        self.chars = None
        if vocabularies.chars is not None:
            self.chars = CharEncoder(
                settings.resolved("char_encoder"),
                settings.resolved("rnn"),
                len(vocabularies.chars),
                settings.char_dim,
                settings.char_hidden,
            )
        self.clusters = None
        if vocabularies.clusters is not None:
            self.clusters = nn.Embedding(len(vocabularies.clusters), settings.cluster_dim, padding_idx=PAD_ID)
        self.extras_size = (self.chars.output_size if self.chars is not None else 0) + (
            settings.cluster_dim if self.clusters is not None else 0
        )

    def emissions(self, batch: Batch) -> torch.Tensor:
        """Tag scores [B, T, tags]."""
        raise NotImplementedError

    def token_extras(self, batch: Batch) -> list[torch.Tensor]:
        """[B, T, D] vectors beside the word embedding: characters, summed cluster embeddings."""
        extras = []
        if self.chars is not None:
            mask = batch.mask
            encoded = self.chars(batch.features["chars"][mask])
            out = encoded.new_zeros((*mask.shape, encoded.size(1)))
            out[mask] = encoded
            extras.append(out)
        if self.clusters is not None:
            extras.append(self.clusters(batch.features["clusters"]).sum(2))
        return extras

    def loss(self, batch: Batch) -> torch.Tensor:
        """Mean negative log-likelihood per real position."""
        if batch.tags is None:
            raise ValueError("the loss needs a batch with gold tags")
        emissions = self.emissions(batch)
        positions = batch.mask.sum()
        if self.crf is not None:
            return self.crf.neg_log_likelihood(emissions, batch.tags, batch.mask) / positions
        return nn.functional.cross_entropy(emissions[batch.mask].float(), batch.tags[batch.mask])

    def tag(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Each note's best tags and each tag's probability (CRF marginal or softmax), ``[B, T]``
        arrays on the host (past a note's length: meaningless), computed for the whole batch at once
        and copied to the host once."""
        emissions = self.emissions(batch)
        if self.crf is not None:
            paths = torch.from_numpy(self.crf.best_paths(emissions, batch.mask)).to(emissions.device)
            probabilities = self.crf.marginals(emissions, batch.mask)
        else:
            probabilities = torch.softmax(emissions.float(), dim=-1)
            paths = probabilities.argmax(-1)
        chosen = probabilities.gather(2, paths.unsqueeze(2)).squeeze(2)
        return paths.cpu().numpy(), chosen.float().cpu().numpy()


class BiRNNTagger(TaggerModel):
    """Word + character embeddings, a bi-GRU (or bi-LSTM) over the whole note, CRF or softmax."""

    def __init__(self, settings: NeuralSettings, vocabularies: Vocabularies) -> None:
        super().__init__(settings, vocabularies)
        self.words = nn.Embedding(len(vocabularies.words), settings.word_dim, padding_idx=PAD_ID)
        self.encoder = SequenceEncoder(
            settings.resolved("rnn"), settings.word_dim + self.extras_size, settings.hidden_dim
        )
        self.out = nn.Linear(self.encoder.output_size, self.num_tags)

    def emissions(self, batch: Batch) -> torch.Tensor:
        parts = [self.words(batch.features["words"]), *self.token_extras(batch)]
        hidden = self.encoder(self.dropout(torch.cat(parts, dim=-1)), batch.lengths)
        return self.out(self.dropout(hidden))


class TSGRU(TaggerModel):
    """Paper 000's TS-GRU: an original-text branch and a text-skeleton branch, each its own embedding
    and a bi-GRU over the ``window`` tokens centred on the token, concatenated into a softmax (Fig. 4)."""

    def __init__(self, settings: NeuralSettings, vocabularies: Vocabularies) -> None:
        super().__init__(settings, vocabularies)
        rnn, hidden, half = settings.resolved("rnn"), settings.hidden_dim, settings.window // 2
        self.words = nn.Embedding(len(vocabularies.words), settings.word_dim, padding_idx=PAD_ID)
        if vocabularies.skeleton is None:
            raise ValueError("TS-GRU needs the skeleton vocabulary")
        self.skeleton = nn.Embedding(len(vocabularies.skeleton), settings.word_dim, padding_idx=PAD_ID)
        # Characters and clusters (off by default) join the original-text branch; not in the paper.
        self.word_branch = WindowEncoder(rnn, settings.word_dim + self.extras_size, hidden, half)
        self.skeleton_branch = WindowEncoder(rnn, settings.word_dim, hidden, half)
        self.out = nn.Linear(self.word_branch.output_size + self.skeleton_branch.output_size, self.num_tags)

    def emissions(self, batch: Batch) -> torch.Tensor:
        mask = batch.mask
        words = torch.cat([self.words(batch.features["words"]), *self.token_extras(batch)], dim=-1)
        skeleton = self.skeleton(batch.features["skeleton"])
        both = torch.cat(
            [self.word_branch(self.dropout(words), mask), self.skeleton_branch(self.dropout(skeleton), mask)], dim=-1
        )
        return self.out(self.dropout(both))


class CEDI(TaggerModel):
    """Paper 002's context-enhanced tagger (Fig. 2), over whole notes without sentence boundaries.

    Deep prefixes (and suffixes, when on) are embedded directly, as §2.2 describes (§2.6 also lists an "LSTM over prefixes",
    which the text does not explain; none is used). The paper leaves the attention's span open;
    here it is the token's 2n + 1 window, which keeps the cost linear in the note's length.
    """

    def __init__(self, settings: NeuralSettings, vocabularies: Vocabularies) -> None:
        super().__init__(settings, vocabularies)
        rnn, n = settings.resolved("rnn"), settings.ngram
        self.ngram = n
        self.words = nn.Embedding(len(vocabularies.words), settings.word_dim, padding_idx=PAD_ID)
        if vocabularies.prefixes is None:
            raise ValueError("CEDI needs the prefix vocabulary")
        self.prefixes = nn.Embedding(len(vocabularies.prefixes), settings.prefix_dim, padding_idx=PAD_ID)
        self.suffixes = None
        if vocabularies.suffixes is not None:
            self.suffixes = nn.Embedding(len(vocabularies.suffixes), settings.prefix_dim, padding_idx=PAD_ID)
        # §2.1: one RNN reads the forward n-gram, another the backward one; their last outputs are the context.
        self.context = WindowEncoder(rnn, settings.word_dim, settings.context_dim, n)
        affixes = settings.prefix_dim * (2 if self.suffixes is not None else 1)
        concatenated = self.extras_size + settings.word_dim + affixes + 2 * settings.context_dim
        self.encoder = SequenceEncoder(rnn, concatenated, settings.hidden_dim)
        # §2.3: additive attention over the concatenated embeddings, queried by the bi-LSTM state.
        self.attention_query = nn.Linear(self.encoder.output_size, settings.attention_dim, bias=False)
        self.attention_key = nn.Linear(concatenated, settings.attention_dim)
        self.attention_value = nn.Linear(concatenated, settings.attention_dim, bias=False)
        self.attention_score = nn.Linear(settings.attention_dim, 1, bias=False)
        self.merge = nn.Linear(self.encoder.output_size + settings.attention_dim, settings.hidden_dim)
        self.out = nn.Linear(settings.hidden_dim, self.num_tags)

    def emissions(self, batch: Batch) -> torch.Tensor:
        mask = batch.mask
        words = self.words(batch.features["words"])
        affixes = [self.prefixes(batch.features["prefixes"])]
        if self.suffixes is not None:
            affixes.append(self.suffixes(batch.features["suffixes"]))
        parts = [*self.token_extras(batch), words, *affixes, self.context(words, mask)]
        embedded = self.dropout(torch.cat(parts, dim=-1))
        hidden = self.encoder(embedded, batch.lengths)
        # Attention over the 2n + 1 window of concatenated embeddings; values are projected first
        # (a linear map before the weighted sum equals one after it, and it saves memory).
        span = 2 * self.ngram + 1
        keys = centered_windows(self.attention_key(embedded), span)  # [B, T, W, A]
        values = centered_windows(self.attention_value(embedded), span)
        present = centered_windows(mask.long(), span).bool()  # padding outside the note is False
        scores = self.attention_score(torch.tanh(keys + self.attention_query(hidden).unsqueeze(2))).squeeze(3)
        weights = torch.softmax(scores.masked_fill(~present, _MASKED), dim=2)
        attended = (weights.unsqueeze(3) * values).sum(2)
        merged = torch.tanh(self.merge(torch.cat([hidden, attended], dim=-1)))
        return self.out(self.dropout(merged))


class ContextWindowTagger(TaggerModel):
    """Paper 001's input (§3.2, Eq. 5): for each token, the vectors of the ``window`` tokens centred on
    it (words, plus characters and clusters when asked for), concatenated; zeros beyond the note."""

    def __init__(self, settings: NeuralSettings, vocabularies: Vocabularies) -> None:
        super().__init__(settings, vocabularies)
        self.window = settings.window
        self.words = nn.Embedding(len(vocabularies.words), settings.word_dim, padding_idx=PAD_ID)
        self.input_size = settings.window * (settings.word_dim + self.extras_size)

    def context_windows(self, batch: Batch) -> torch.Tensor:
        """[B, T, window * D]: C_m(x_{t-m} .. x_{t+m}) for every position t."""
        vectors = torch.cat([self.words(batch.features["words"]), *self.token_extras(batch)], dim=-1)
        return centered_windows(vectors, self.window).flatten(2)


class Elman(ContextWindowTagger):
    """Paper 001's E-RNN (Eqs. 7, 10): h(t) = f(W C(t) + V h(t - 1) + b), softmax(U h(t) + c), one layer.

    ``nn.RNN`` (tanh) in place of the paper's sigmoid f: sigmoid(z) = (1 + tanh(z / 2)) / 2, an affine
    map of the state that W, V, b and the output layer absorb, so both describe the same networks
    (up to the initial state), and the fused kernel is many times faster than a Python loop."""

    def __init__(self, settings: NeuralSettings, vocabularies: Vocabularies) -> None:
        super().__init__(settings, vocabularies)
        self.recurrent = nn.RNN(self.input_size, settings.hidden_dim, nonlinearity="tanh", batch_first=True)
        self.out = nn.Linear(settings.hidden_dim, self.num_tags)

    def emissions(self, batch: Batch) -> torch.Tensor:
        # Forward only: padding follows each note's real tokens, so it never reaches them.
        hidden, _ = self.recurrent(self.context_windows(batch))
        return self.out(self.dropout(hidden))  # §3.6: dropout before the softmax layer


class JordanCell(nn.Module):
    """Paper 001's J-RNN (Eq. 12): h(t) = sigmoid(W C(t) + V P(y(t - 1)) + b) and P(y(t)) =
    softmax(U h(t) + c), fed back into the next step (P(y(0)) = 0). W C(t) is computed for every step
    at once; only the feedback runs step by step, over the whole batch."""

    def __init__(self, input_size: int, hidden_size: int, num_tags: int, dropout: nn.Module) -> None:
        super().__init__()
        self.input = nn.Linear(input_size, hidden_size)  # W, b
        self.feedback = nn.Linear(num_tags, hidden_size, bias=False)  # V: previous posteriors -> hidden
        self.out = nn.Linear(hidden_size, num_tags)  # U, c
        self.dropout = dropout

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """``inputs`` [B, T, D] -> output scores [B, T, tags] (before the softmax)."""
        projected = self.input(inputs)
        previous = projected.new_zeros((inputs.size(0), self.out.out_features))
        scores = []
        for t in range(inputs.size(1)):
            hidden = torch.sigmoid(projected[:, t] + self.feedback(previous))
            scores.append(self.out(self.dropout(hidden)))
            previous = torch.softmax(scores[-1].float(), dim=-1).to(projected.dtype)
        return torch.stack(scores, dim=1)


class Jordan(ContextWindowTagger):
    """Paper 001's J-RNN: the context-window input and a Jordan cell; its output layer is the tag
    scores (softmax, or a CRF's emissions when ``output = "crf"``; the posteriors fed back stay softmax)."""

    def __init__(self, settings: NeuralSettings, vocabularies: Vocabularies) -> None:
        super().__init__(settings, vocabularies)
        self.recurrent = JordanCell(self.input_size, settings.hidden_dim, self.num_tags, self.dropout)

    def emissions(self, batch: Batch) -> torch.Tensor:
        return self.recurrent(self.context_windows(batch))


MODEL_CLASSES: dict[str, type[TaggerModel]] = {
    "bigru": BiRNNTagger,
    "tsgru": TSGRU,
    "cedi": CEDI,
    "elman": Elman,
    "jordan": Jordan,
}


def build_model(settings: NeuralSettings, vocabularies: Vocabularies) -> TaggerModel:
    """The architecture named by ``settings`` sized by ``vocabularies``."""
    return MODEL_CLASSES[settings.architecture](settings, vocabularies)
