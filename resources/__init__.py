"""Data files shipped with hybriddeid: regex rules, dictionaries, taxonomies."""
