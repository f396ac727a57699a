"""Evaluation against gold spans with the i2b2 2014 criteria: token, strict, relaxed, their HIPAA
subsets, micro and macro averages, per category and per subtype (see ``matching`` for the semantics),
optionally under a PHI set (``hybriddeid.core.profiles``) with gold spans outside it as don't-care regions.
"""

from hybriddeid.evaluation.matching import CRITERIA, RELAXED_END_TOLERANCE
from hybriddeid.evaluation.report import LEVELS, PRF, EvaluationReport
from hybriddeid.evaluation.scorer import evaluate, evaluate_directories

__all__ = [
    "CRITERIA",
    "LEVELS",
    "PRF",
    "RELAXED_END_TOLERANCE",
    "EvaluationReport",
    "evaluate",
    "evaluate_directories",
]
