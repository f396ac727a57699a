"""Knowledge resources for the CRF features: word clusters learned from unlabelled notes
(Brown paths, word2vec k-means ids) and dictionaries (gazetteers).

The loaders (``clusters``, ``dictionaries``) need only the standard library; building clusters
needs numpy and gensim (``pip install hybriddeid[knowledge]``).
"""
