"""Named, rebuildable variants of a graph: the candidates opt=1 and the tuner choose from.

A variant is a named pipeline (:data:`VARIANTS`, pass ids of
:mod:`aneforge.optimizer.passes`) run on the graph: a deterministic function of the
graph and its name, so a tuning cache can store only the name. Lossless variants
compute the same bits (route swaps, canonical rewrites): they apply only records of the
bit-identical class, and a variant's ``exactness`` is the weakest class of what its
passes applied (so ``lossless`` follows from the records' classes, not from its name).
Equal-or-better rewrites (``reduce_sum_to_matmul``) are no variant: they change values,
and only ``tune(target_error=...)`` measures them.
The int8 variants are lossy and only enter where accuracy gates admit them.

- ``native`` (no pass): the graph as built (the ``opt=0`` program);
- ``routes`` (``route::select``): the lossless route pass (per bridge node, native or
  decomposition by the cost model);
- ``decomposed`` (``route::decompose``): every route-bearing bridge op replaced by its
  fused decomposition (bit-identical alts only);
- ``canonical`` (``route::select``, ``canon::rules``): the route pass plus the canonical
  rewrites;
- ``int8`` / ``routes+int8`` (``compress::int8``, after ``route::select`` for the
  second): the whole-graph per-channel int8 weights on top;
- ``int4`` / ``auto`` (``compress::weights`` with that mode; tuner only):
  ``compile(compress='int4' | 'auto')`` at the default ``compress_atol`` (0.05): int4
  tables where each weight's gate admits them, falling back to int8 / fp16 (``auto``
  adds sparse). Lossless when the pass chose nothing lossy (fp16 and sparse only); their
  report is ``Variant.report``.

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
from ..compiler.program import PassReport
from ..cost.estimate import estimate
from ..errors import AneforgeWarning, OptionError
from ..graph.hashing import structural_hash
from ..graph.rewrite import BIT_IDENTICAL, weakest
from ..graph.tensor import Tensor
from .measure import MIN_LOSSY_SPEEDUP
from .passes import PassResult, PassState, pipeline, register_pass, run_pipeline

#: Each variant's pipeline, by the name reports and the tuning cache use.
VARIANTS = {
    "native": pipeline("native"),
    "routes": pipeline("routes", "route::select"),
    "decomposed": pipeline("decomposed", "route::decompose"),
    "canonical": pipeline("canonical", "route::select", "canon::rules"),
    "int8": pipeline("int8", "compress::int8"),
    "routes+int8": pipeline("routes+int8", "route::select", "compress::int8"),
    "int4": pipeline("int4", ("compress::weights", {"mode": "int4"})),
    "auto": pipeline("auto", ("compress::weights", {"mode": "auto"})),
}
LOSSLESS = ("native", "routes", "decomposed", "canonical")
LOSSY = ("int8", "routes+int8")
COMPRESSED = ("int4", "auto")  # weight compression, accuracy-gated per weight
assert set(VARIANTS) == set(LOSSLESS + LOSSY + COMPRESSED)


@dataclass(frozen=True)
class Variant:
    """One candidate lowering: the outputs of its pipeline and the pipeline's
    :class:`~aneforge.compiler.program.PassReport`; ``exactness`` is the weakest class
    of the rules and routes it applied (:data:`~aneforge.graph.rewrite.EXACTNESS`)."""

    name: str
    outputs: tuple[Tensor, ...]
    exactness: str
    report: dict | None = None  # the compression report of an int4 / auto variant
    passes: PassReport = PassReport()

    @property
    def lossless(self) -> bool:
        """Whether the variant computes the ``opt=0`` program's bits (bit-identical)."""
        return self.exactness == BIT_IDENTICAL


def build_variant(outputs, name: str) -> Variant:
    """Build variant ``name`` of the graph of ``outputs``: run its pipeline.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import flatten
        >>> v = build_variant([flatten(af.input((2, 3, 4)), 1)], "decomposed")
        >>> v.outputs[0].op, v.lossless, v.passes.ran
        ('reshape', True, ('route::decompose',))
    """
    if name not in VARIANTS:
        raise OptionError(f"unknown variant {name!r}; known: {LOSSLESS + LOSSY + COMPRESSED}")
    state, report = run_pipeline(VARIANTS[name], list(outputs), warn=False)
    exactness = weakest(r.exactness for r in report.records)
    return Variant(name, state.outputs, exactness, report.entries.get("compression"), report)


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


@register_pass(
    "variant::pick_by_estimate",
    "the variant with the lowest estimate; a lossy one only when predicted "
    "MIN_LOSSY_SPEEDUP x faster than the best lossless one",
)
def pick_by_estimate(state: PassState) -> PassResult:
    """opt=1: the variant with the lowest estimate; a lossy one only when it is predicted
    at least ``MIN_LOSSY_SPEEDUP`` times faster than the best lossless one (the margin
    the tuner asks of a measured lossy variant). A lossy pick is warned about."""
    variants = build_variants(state.outputs, lossy=True)
    order = list(variants)
    cost = {n: estimate(list(variants[n].outputs)) for n in order}
    lossless = min((n for n in order if variants[n].lossless), key=lambda n: (cost[n], n))
    name = min(order, key=lambda n: (cost[n], order.index(n)))
    if not variants[name].lossless and cost[lossless] < MIN_LOSSY_SPEEDUP * cost[name]:
        name = lossless
    chosen = variants[name]
    found = ()
    if not chosen.lossless:
        message = (
            f"compile(opt=1) chose the lossy '{name}' variant (about 1% weight error); "
            "use opt='routes' to stay lossless or opt=2 to validate against the baseline"
        )
        found = ((AneforgeWarning, message),)
    entry = {"variant": {"variant": name, "lossless": chosen.lossless}}
    return PassResult(chosen.outputs, entry, found, chosen.exactness)
