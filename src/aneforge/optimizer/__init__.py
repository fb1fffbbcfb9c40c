"""The optimizer: rule sets, routes, variants, tuning and the tuning cache.

The rewrite engine it drives is :mod:`aneforge.graph.rewrite` (re-exported here).
"""

from ..graph.rewrite import RewriteReport, Rule, rewrite
from .dedupe import merge_duplicates
from .rules import CANONICAL, NUMERIC, REDUCE_TO_MATMUL, canonicalize, reduce_sum_to_matmul

__all__ = [
    "CANONICAL",
    "NUMERIC",
    "REDUCE_TO_MATMUL",
    "RewriteReport",
    "Rule",
    "canonicalize",
    "merge_duplicates",
    "reduce_sum_to_matmul",
    "rewrite",
]
