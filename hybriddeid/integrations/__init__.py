"""Integrations with engines that run hybriddeid at scale (``hybriddeid.integrations.spark``: Apache
Spark, ``pip install hybriddeid[spark]``). Nothing here is imported by the core."""
