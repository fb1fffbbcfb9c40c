"""The optimizer: the rewrite engine, its rule sets and (with issue 3) routes and tuning."""

from .rewrite import RewriteReport, Rule, rewrite
from .rules import CANONICAL, NUMERIC, REDUCE_TO_MATMUL, canonicalize, reduce_sum_to_matmul

__all__ = [
    "CANONICAL",
    "NUMERIC",
    "REDUCE_TO_MATMUL",
    "RewriteReport",
    "Rule",
    "canonicalize",
    "reduce_sum_to_matmul",
    "rewrite",
]
