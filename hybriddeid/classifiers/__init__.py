"""The classifiers a pipeline combines; each follows ``base.Classifier``."""
from hybriddeid.classifiers.char_crf import CharCRF
from hybriddeid.classifiers.rules import RuleClassifier
from hybriddeid.classifiers.token_crf import TokenCRF

__all__ = ["CharCRF", "RuleClassifier", "TokenCRF"]
