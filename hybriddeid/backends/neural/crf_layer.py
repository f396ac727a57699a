"""A linear-chain CRF output layer in PyTorch: forward algorithm, Viterbi, tag marginals.

Emissions are ``[batch, time, tags]``; ``mask`` marks the real positions of each sequence, which
must be a prefix (left-aligned padding). Computed in float32 even under mixed precision.
"""
from __future__ import annotations

import torch
from torch import nn


class CRF(nn.Module):
    """Transition scores between tags, plus start and end scores, learned jointly with the encoder."""

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z of each sequence by the forward algorithm: ``[batch]``."""
        emissions = emissions.float()
        alpha = self.start + emissions[:, 0]
        for t in range(1, emissions.size(1)):
            step = torch.logsumexp(alpha.unsqueeze(2) + self.transitions, dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t].unsqueeze(1), step, alpha)
        return torch.logsumexp(alpha + self.end, dim=1)

    def path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unnormalised score of the given tag paths: ``[batch]``."""
        emissions = emissions.float()
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

    def marginals(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """P(tag at t) for every position: the gradient of log Z with respect to the emissions."""
        with torch.enable_grad():
            leaf = emissions.detach().float().requires_grad_(True)
            (gradient,) = torch.autograd.grad(self.log_partition(leaf, mask).sum(), leaf)
        return gradient * mask.unsqueeze(2)

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The best tag path of each sequence (Viterbi), cut to its length."""
        emissions = emissions.float()
        lengths = mask.long().sum(1).tolist()
        score = self.start + emissions[:, 0]
        backpointers = []
        for t in range(1, emissions.size(1)):
            candidates = score.unsqueeze(2) + self.transitions  # [batch, from, to]
            best, pointer = candidates.max(dim=1)
            score = torch.where(mask[:, t].unsqueeze(1), best + emissions[:, t], score)
            backpointers.append(pointer)
        last_tags = (score + self.end).argmax(dim=1).tolist()
        table = torch.stack(backpointers, dim=1).tolist() if backpointers else [[] for _ in lengths]  # [batch][t-1][to]
        paths = []
        for pointers, tag, length in zip(table, last_tags, lengths):
            path = [tag]
            for t in range(length - 1, 0, -1):
                tag = pointers[t - 1][tag]
                path.append(tag)
            paths.append(path[::-1])
        return paths
