"""A linear-chain CRF output layer in PyTorch: forward algorithm, Viterbi, tag marginals.

Emissions are ``[batch, time, tags]``; ``mask`` marks the real positions of each sequence, which
must be a prefix (left-aligned padding). Computed in float32 even under mixed precision.

Every recursion steps over positions with a few tensor operations over the whole batch, and all
that does not depend on the previous step (exponentials of the emissions, masks, sums of logs,
gathering each sequence's last step, backtracking the Viterbi path) is done for all positions at
once, outside the loop:

- the forward and backward algorithms run in scaled probability space: one ``[B, K] x [K, K]``
  product per step, each step's vector renormalised to sum 1 and the logs of the scales summed
  after the loop (no log-sum-exp per step);
- Viterbi stays in log space (exact max-plus, so its paths are those of the plain recursion) and
  runs every sequence to the batch's width; each sequence's final scores are read at its own
  last position, and the back-pointers are followed on the host in one pass over positions for
  the whole batch;
- marginals come from that forward-backward pass, without autograd.

On a GPU, where each of those small steps costs a kernel launch, ``log Z`` (training) and the
marginals (its gradient, tagging) can instead be taken by a tree (``scan = "tree"``, the default on CUDA): the per-position transfer matrices are
multiplied pairwise, halving their number at each level, so a note of T positions costs log2(T)
batched matrix products (T K^3 work instead of T K^2, which the CPU pays for, so it keeps the steps).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from hybriddeid.backends.neural.settings import CRF_SCANS as SCANS
from hybriddeid.backends.neural.settings import CRF_VITERBIS as VITERBIS

STEPS_PER_GRAPH = 64  # Viterbi steps captured in one CUDA graph, replayed as often as a batch needs
_TINY = 1e-30  # floor of exp(transition - max transition): a transition 69 nats below the best counts as that
F = TypeVar("F", bound=Callable)


def full_precision(method: F) -> F:
    """Run a CRF method with autocast off: its sums and products of probabilities need float32."""

    @functools.wraps(method)
    def wrapped(self: CRF, emissions: torch.Tensor, *args, **kwargs):
        with torch.autocast(emissions.device.type, enabled=False):
            return method(self, emissions.float(), *args, **kwargs)

    return wrapped  # type: ignore[return-value]  # functools.wraps keeps method's signature; mypy cannot see it


class CRF(nn.Module):
    """Transition scores between tags, plus start and end scores, learned jointly with the encoder."""

    def __init__(self, num_tags: int, scan: str = "auto", viterbi: str = "auto") -> None:
        super().__init__()
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {list(SCANS)}, not {scan!r}")
        if viterbi not in VITERBIS:
            raise ValueError(f"viterbi must be one of {list(VITERBIS)}, not {viterbi!r}")
        self.num_tags = num_tags
        self.scan = scan  # how log Z is taken: "steps", "tree", or "auto" (the tree on CUDA)
        self.viterbi = viterbi  # how Viterbi steps: "steps", "graph" (CUDA graphs), or "auto" (graphs on CUDA)
        self._graphs = ViterbiGraphs()
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))

    def _scaled(self, emissions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """exp of the emissions and transitions, each shifted by its maximum (per position, and once),
        with those shifts: ``(probabilities [B, T, K], shifts [B, T], exp transitions [K, K], shift)``."""
        shift = emissions.detach().amax(dim=2)
        probabilities = (emissions - shift.unsqueeze(2)).exp()
        transition_shift = self.transitions.detach().max()
        transitions = (self.transitions - transition_shift).exp().clamp_min(_TINY)
        return probabilities, shift, transitions, transition_shift

    def _forward(self, emissions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Scaled forward vectors ``[B, T, K]`` (each sums to 1), the log of each step's scale
        including its shifts ``[B, T]``, and the shifted exp emissions and transitions it used
        (``_scaled``'s, for the backward pass)."""
        probabilities, shift, transitions, transition_shift = self._scaled(emissions)
        start_shift = self.start.detach().max()
        alpha = (self.start - start_shift).exp() * probabilities[:, 0]
        total = alpha.sum(1, keepdim=True)
        alpha = alpha / total
        alphas, totals = [alpha], [total]
        for t in range(1, emissions.size(1)):
            alpha = (alpha @ transitions) * probabilities[:, t]
            total = alpha.sum(1, keepdim=True)
            alpha = alpha / total
            alphas.append(alpha)
            totals.append(total)
        log_scales = torch.cat(totals, dim=1).log() + shift
        log_scales = log_scales + torch.cat(
            [start_shift.view(1, 1), transition_shift.expand(1, emissions.size(1) - 1)], dim=1
        )
        return torch.stack(alphas, dim=1), log_scales, probabilities, transitions

    @full_precision
    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z of each sequence by the forward algorithm: ``[batch]``."""
        if self._tree(emissions):
            return self._log_partition_tree(emissions, mask)
        alphas, log_scales, _, _ = self._forward(emissions)
        last = (mask.long().sum(1) - 1).clamp(min=0)
        final = alphas[torch.arange(alphas.size(0), device=alphas.device), last]  # [B, K] at each sequence's end
        return (log_scales * mask).sum(1) + torch.logsumexp(final.clamp_min(_TINY).log() + self.end, dim=1)

    def _log_partition_tree(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z by multiplying the transfer matrices M_t = exp(transitions) * exp(emissions_t)
        pairwise (identity past a sequence's end), each product rescaled by its largest entry."""
        probabilities, shift, transitions, transition_shift = self._scaled(emissions)
        batch, width, tags = probabilities.shape
        start_shift = self.start.detach().max()
        first = (self.start - start_shift).exp() * probabilities[:, 0]  # [B, K]
        log_scale = start_shift + (shift * mask).sum(1) + transition_shift * (mask[:, 1:].sum(1))
        if width > 1:
            steps = transitions * probabilities[:, 1:].unsqueeze(2)  # [B, T-1, from, to]
            eye = torch.eye(tags, device=emissions.device, dtype=steps.dtype)
            steps = torch.where(mask[:, 1:, None, None], steps, eye)
            while steps.size(1) > 1:
                if steps.size(1) % 2:
                    steps = torch.cat([steps, eye.expand(batch, 1, tags, tags)], dim=1)
                steps = steps[:, 0::2] @ steps[:, 1::2]
                peak = steps.detach().amax(dim=(2, 3), keepdim=True).clamp_min(_TINY)
                steps = steps / peak
                log_scale = log_scale + peak.log().sum((1, 2, 3))
            first = (first.unsqueeze(1) @ steps[:, 0]).squeeze(1)
        end_shift = self.end.detach().max()
        final = (first * (self.end - end_shift).exp()).sum(1)
        return log_scale + end_shift + final.clamp_min(_TINY).log()

    @full_precision
    def path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unnormalised score of the given tag paths: ``[batch]``."""
        mask_f = mask.float()
        emitted = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)
        score = self.start[tags[:, 0]] + (emitted * mask_f).sum(1)
        steps = self.transitions[tags[:, :-1], tags[:, 1:]]
        score = score + (steps * mask_f[:, 1:]).sum(1)
        last = tags.gather(1, (mask.long().sum(1) - 1).unsqueeze(1)).squeeze(1)
        return score + self.end[last]

    def neg_log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Training loss: the summed negative log-likelihood of the gold paths."""
        return (self.log_partition(emissions, mask) - self.path_score(emissions, tags, mask)).sum()

    def _tree(self, emissions: torch.Tensor) -> bool:
        return self.scan == "tree" or (self.scan == "auto" and emissions.device.type == "cuda")

    @torch.no_grad()
    @full_precision
    def marginals(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """P(tag at t) for every position: ``[B, T, K]``, zeros on padding. By the scaled
        forward-backward pass, or with the tree as the gradient of its log Z (few launches on a GPU)."""
        if self._tree(emissions):
            with torch.enable_grad():
                leaf = emissions.detach().requires_grad_(True)
                (gradient,) = torch.autograd.grad(self._log_partition_tree(leaf, mask).sum(), leaf)
            return gradient * mask.unsqueeze(2)
        alphas, _, probabilities, transitions = self._forward(emissions)
        end = (self.end - self.end.max()).exp().expand(emissions.size(0), -1)
        beta = end
        betas = [beta]
        backward = transitions.t()
        for t in range(emissions.size(1) - 2, -1, -1):
            step = (probabilities[:, t + 1] * beta) @ backward
            step = step / step.sum(1, keepdim=True)
            beta = torch.where(mask[:, t + 1].unsqueeze(1), step, end)  # a sequence ending at t starts here
            betas.append(beta)
        product = alphas * torch.stack(betas[::-1], dim=1)
        product = product / product.sum(2, keepdim=True).clamp_min(_TINY)
        return product * mask.unsqueeze(2)

    @torch.no_grad()
    @full_precision
    def best_paths(self, emissions: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        """The best tag path of each sequence (Viterbi) as ``[B, T]`` tag ids; positions past a
        sequence's length hold nothing meaningful."""
        batch, width, _ = emissions.shape
        first = self.start + emissions[:, 0]
        if width > 1 and self._graphed(emissions):
            scores, pointers = self._graphs.steps(first, emissions[:, 1:].transpose(0, 1), self.transitions)
            scores = torch.cat([first.unsqueeze(0), scores])
        else:
            scores, pointers = self._steps(first, emissions)
        rows = torch.arange(batch, device=emissions.device)
        last = mask.long().sum(1) - 1
        last_tags = (scores[last, rows] + self.end).argmax(dim=1)
        # Back-pointers on the host (as int16: a quarter of the copy from a GPU): one pass over
        # positions, the whole batch at each.
        table = pointers.to(torch.int16).cpu().numpy()
        ends, final_tags = last.cpu().numpy(), last_tags.cpu().numpy()
        paths = np.zeros((batch, width), dtype=np.int64)
        index = np.arange(batch)
        tag = final_tags.copy()
        for t in range(width - 1, -1, -1):
            tag = np.where(ends == t, final_tags, tag)  # a sequence's path starts at its own end
            paths[:, t] = tag
            if t:
                tag = table[t - 1, index, tag].astype(np.int64)
        return paths

    def _steps(self, first: torch.Tensor, emissions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Viterbi's forward steps one position at a time: the scores ``[T, B, K]`` and back-pointers
        ``[T - 1, B, K]`` (each tag's best previous tag)."""
        score = first
        scores, pointers = [score], []
        for t in range(1, emissions.size(1)):
            best, pointer = (score.unsqueeze(2) + self.transitions).max(dim=1)  # over the previous tag
            score = best + emissions[:, t]
            scores.append(score)
            pointers.append(pointer)
        table = torch.stack(pointers) if pointers else first.new_zeros((0, *first.shape), dtype=torch.long)
        return torch.stack(scores), table

    def _graphed(self, emissions: torch.Tensor) -> bool:
        """Whether Viterbi's steps replay a captured CUDA graph (``viterbi = "graph"``, or "auto" on CUDA)."""
        wanted = self.viterbi == "graph" or (self.viterbi == "auto" and emissions.device.type == "cuda")
        return wanted and emissions.device.type == "cuda"

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The best tag path of each sequence (Viterbi), cut to its length."""
        paths = self.best_paths(emissions, mask)
        return [row[:length].tolist() for row, length in zip(paths, mask.long().sum(1).tolist())]


class ViterbiGraphs:
    """Viterbi's forward steps replayed from CUDA graphs.

    A step is three small kernels (add the transitions, take the best previous tag, add the
    emissions) whose launches, not their work, are what a GPU spends on it: a batch of notes 700
    tokens wide costs 2,100 launches. Here ``STEPS_PER_GRAPH`` steps are captured once per batch
    size (rounded up to a power of two) and tag count, and replayed as often as a batch needs, with
    one copy in and three out per replay. The same operations as ``CRF._steps`` on the same values,
    so the same scores and back-pointers."""

    def __init__(self) -> None:
        self._captured: dict[tuple[int, int, torch.device], _CapturedSteps] = {}

    def steps(
        self, first: torch.Tensor, emissions: torch.Tensor, transitions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``[W, B, K]`` and back-pointers ``[W, B, K]`` of the positions after the first,
        given its scores ``first`` ``[B, K]`` and their emissions ``[W, B, K]``."""
        batch, tags = first.shape
        rows = max(8, 1 << (batch - 1).bit_length())
        key = (rows, tags, first.device)
        if key not in self._captured:
            self._captured[key] = _CapturedSteps(rows, tags, first.device)
        return self._captured[key].run(first, emissions, transitions.detach())


class _CapturedSteps:
    """``STEPS_PER_GRAPH`` Viterbi steps over ``rows`` sequences, captured as one CUDA graph on
    buffers of fixed address (what a graph reads and writes)."""

    def __init__(self, rows: int, tags: int, device: torch.device) -> None:
        self.transitions = torch.zeros(tags, tags, device=device)
        self.score = torch.zeros(rows, tags, device=device)  # the scores before the first captured step
        self.emissions = torch.zeros(STEPS_PER_GRAPH, rows, tags, device=device)
        self.scores = torch.zeros(STEPS_PER_GRAPH, rows, tags, device=device)
        self.pointers = torch.zeros(STEPS_PER_GRAPH, rows, tags, dtype=torch.long, device=device)
        self.best = torch.zeros(rows, tags, device=device)
        warm_up = torch.cuda.Stream(device)  # CUDA graphs want their operations run once before capture
        warm_up.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(warm_up):
            self._record()
        torch.cuda.current_stream(device).wait_stream(warm_up)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._record()

    def _record(self) -> None:
        score = self.score
        for step in range(STEPS_PER_GRAPH):
            torch.max(score.unsqueeze(2) + self.transitions, dim=1, out=(self.best, self.pointers[step]))
            torch.add(self.best, self.emissions[step], out=self.scores[step])
            score = self.scores[step]

    def run(
        self, first: torch.Tensor, emissions: torch.Tensor, transitions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        width, batch, tags = emissions.shape
        scores = emissions.new_empty((width, batch, tags))
        pointers = torch.empty((width, batch, tags), dtype=torch.long, device=emissions.device)
        self.transitions.copy_(transitions)
        self.score[:batch].copy_(first)
        for begin in range(0, width, STEPS_PER_GRAPH):
            chunk = emissions[begin : begin + STEPS_PER_GRAPH]
            steps = chunk.size(0)
            self.emissions[:steps, :batch].copy_(chunk)
            self.graph.replay()
            scores[begin : begin + steps].copy_(self.scores[:steps, :batch])
            pointers[begin : begin + steps].copy_(self.pointers[:steps, :batch])
            self.score.copy_(self.scores[-1])
        return scores, pointers
