"""Named, rebuildable variants of a graph: the candidates opt=1 and the tuner choose from.

A variant is a deterministic function of the graph and its name, so a tuning cache can
store only the name. Lossless variants compute the same bits (route swaps, canonical
rewrites): they apply only records of the bit-identical class, and a variant's
``exactness`` is the weakest class of what it applied (so ``lossless`` follows from the
records' classes, not from its name). Equal-or-better rewrites (``reduce_sum_to_matmul``)
are no variant: they change values, and only ``tune(target_error=...)`` measures them.
The int8 variants are lossy and only enter where accuracy gates admit them.

- ``native``: the graph as built (the ``opt=0`` program);
- ``routes``: the lossless route pass (per bridge node, native or decomposition by the
  cost model);
- ``decomposed``: every route-bearing bridge op replaced by its fused decomposition
  (bit-identical alts only);
- ``canonical``: the route pass plus the canonical rewrites;
- ``int8`` / ``routes+int8``: the whole-graph per-channel int8 weights on top;
- ``int4`` / ``auto`` (compression, tuner only): ``compile(compress='int4' | 'auto')``
  at the default ``compress_atol`` (0.05): int4 tables where each weight's gate admits
  them, falling back to int8 / fp16 (``auto`` adds sparse). Lossless when the pass chose
  nothing lossy (fp16 and sparse only); their report is ``Variant.report``.

The weight-quantized variants (``int8``, ``routes+int8``, ``int4``, ``auto``) are built
only when :func:`int8_admissible` proves, from the inputs' declared ranges, that every
activation stays within the int8 programs' activation ceiling (4094: ANEForge measured
int8 programs saturating activations past it). An input without a declared range
proves nothing, so such a graph gets lossless variants only.

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.optimizer.variants import build_variants
    >>> x = af.input((2, 8), name="x", range=(-1, 1))
    >>> sorted(build_variants([x @ np.ones((8, 4))], lossy=True))
    ['int8', 'native']
    >>> sorted(build_variants([af.input((2, 8)) @ np.ones((8, 4))], lossy=True))
    ['native']
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis.ranges import INT8_ACTIVATION_LIMIT, range_analysis
from ..compression import compress_graph, quantize_graph_int8
from ..cost.estimate import estimate
from ..errors import OptionError
from ..graph.hashing import structural_hash
from ..graph.rewrite import BIT_IDENTICAL, rewrite, weakest
from ..graph.rewrite import LOSSY as NO_CLAIM  # the exactness class (LOSSY here names variants)
from ..graph.tensor import Tensor
from .routes import route_rules, select_routes
from .rules import CANONICAL

LOSSLESS = ("native", "routes", "decomposed", "canonical")
LOSSY = ("int8", "routes+int8")
COMPRESSED = ("int4", "auto")  # weight compression, accuracy-gated per weight


@dataclass(frozen=True)
class Variant:
    """One candidate lowering: ``exactness`` is the weakest class of the rules and
    routes it applied (:data:`~aneforge.graph.rewrite.EXACTNESS`)."""

    name: str
    outputs: tuple[Tensor, ...]
    exactness: str
    report: dict | None = None  # the compression report of an int4 / auto variant

    @property
    def lossless(self) -> bool:
        """Whether the variant computes the ``opt=0`` program's bits (bit-identical)."""
        return self.exactness == BIT_IDENTICAL


def build_variant(outputs, name: str) -> Variant:
    """Build variant ``name`` of the graph of ``outputs``."""

    outs = list(outputs)
    base, _, suffix = name.partition("+")
    if name in ("int8", *COMPRESSED):
        base, suffix = "native", name
    applied: list[str] = []  # the classes of the records that fired
    if base == "routes" or base == "canonical":
        outs, decisions = select_routes(outs, estimate)
        applied += [d["loss_class"] for d in decisions if d["choice"] == "fused"]
        if base == "canonical":
            outs, report = rewrite(outs, CANONICAL)
            classes = {r.name: r.exactness for r in CANONICAL}
            applied += [classes[rule] for rule in report.matches]
    elif base == "decomposed":
        rules = route_rules()
        outs, report = rewrite(outs, rules)
        applied += [r.exactness for r in rules if r.name in report.matches]
    elif base != "native":
        raise OptionError(f"unknown variant {name!r}; known: {LOSSLESS + LOSSY + COMPRESSED}")
    if suffix == "int8":
        outs = quantize_graph_int8(outs)
        applied.append(NO_CLAIM)
    elif suffix in COMPRESSED:
        outs, report = compress_graph(outs, suffix)
        applied.append(BIT_IDENTICAL if report["lossy"] == 0 else NO_CLAIM)
        return Variant(name, tuple(outs), weakest(applied), report)
    elif suffix:
        raise OptionError(f"unknown variant {name!r}; known: {LOSSLESS + LOSSY + COMPRESSED}")
    return Variant(name, tuple(outs), weakest(applied))


def int8_admissible(outputs) -> bool:
    """Whether the range analysis proves every activation of the graph of ``outputs``
    (each node's output and internal steps) stays within the int8 activation ceiling
    of 4094, from the inputs' declared ranges: the condition for a weight-quantized
    variant to be a candidate.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((2, 8), name="x", range=(-1, 1))
        >>> int8_admissible([x @ np.ones((8, 4))]), int8_admissible([x * 5000.0])
        (True, False)
    """
    return range_analysis(list(outputs)).activations_within(INT8_ACTIVATION_LIMIT)


def build_variants(outputs, lossy: bool, compress: bool = False) -> dict[str, Variant]:
    """All distinct variants (duplicates by structural hash dropped, first name kept).

    ``compress`` adds the compression variants (:data:`COMPRESSED`) after the lossy ones.
    Both need :func:`int8_admissible` (module docstring).
    """
    if (lossy or compress) and not int8_admissible(outputs):
        lossy = compress = False
    names = LOSSLESS + (LOSSY if lossy else ()) + (COMPRESSED if compress else ())
    seen: dict[str, str] = {}
    out: dict[str, Variant] = {}
    for name in names:
        v = build_variant(outputs, name)
        h = structural_hash(v.outputs)
        if h in seen:
            continue
        seen[h] = name
        out[name] = v
    return out
