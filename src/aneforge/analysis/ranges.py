"""``range_analysis``: where a graph can overflow or underflow fp16, before it runs.

From the declared ranges of its inputs (``af.input(..., range=(lo, hi))``, or
``input_ranges=`` here) the analysis walks the graph once and gives every node an
:class:`~aneforge.graph.ranges.Interval` that holds every value the emulator can produce
for it, with the engine's rounding, narrow sums and overflow to inf: each op's transfer
rule lives on its op record (``OpDef.range``). Contractions bound their outputs with the
known weights (row sums of ``|W|`` against the input interval), norms and softmax with
their true output bounds, and composite ops record their internal steps (the ``x*x`` of
a norm's variance, a sum before its division...), so a step that overflows inside an op
whose output stays finite is still found.

An input without a declared range is **unknown**: its interval is every fp16 value, and
no hazard is reported downstream of it (nothing about it is assumed).

Hazards (:class:`RangeHazard`), each naming the node, op, bound and a fix:

- ``overflow``: *will* (every value is past 65504) or *may* (the interval reaches past
  it), for a node's output or one of its internal steps;
- ``matmul_saturation`` (with a target): a contraction's output may pass the target's
  output limit of 32752 and become inf;
- ``crop_dma`` (A13/A14 targets): a width-offset slice may see ``|v| > 4094``, which
  the crop-DMA turns into inf;
- ``nan``: the node can make a NaN from NaN-free inputs (inf - inf, 0 * inf, log of a
  negative...);
- ``underflow``: every value of a multiplying node (mul, div, square, pow, a
  contraction) is below the fp16 subnormal range and becomes 0 (*will*), or lies in it
  and keeps fewer than 11 bits (*subnormal*), while its inputs were larger.

Example:
    >>> import aneforge as af
    >>> x = af.input((2, 64), name="x", range=(-300.0, 300.0))
    >>> rep = af.range_analysis(af.layer_norm(x, name="ln"))
    >>> h = rep.hazards[0]
    >>> h.kind, h.certainty, h.name, h.step
    ('overflow', 'may', 'ln', 'd*d')
    >>> str(rep["ln"].interval)
    '[-8.008, 8.008]'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..compiler.program import Program
from ..emulator.chips import chip_numerics, is_width_offset
from ..emulator.gemm import gemm_reference
from ..emulator.interpreter import execute_fp16
from ..errors import OptionError
from ..graph.facts import Flag
from ..graph.fp16 import FP16_MAX
from ..graph.ranges import SMALLEST_NORMAL, Interval, RangeEnv, check_range
from ..graph.registry import get_op
from ..graph.tensor import integer_feed
from ..tables import TableMixin

INF = math.inf
#: int8 programs saturate activations past this magnitude (ANEForge's measurement).
INT8_ACTIVATION_LIMIT = 4094.0


@dataclass(frozen=True)
class RangeHazard:
    """One range hazard of a node (module docstring: the kinds).

    Attributes:
        kind: ``overflow``, ``matmul_saturation``, ``crop_dma``, ``nan``, ``underflow``.
        certainty: ``will`` or ``may`` (``subnormal`` for an underflow that keeps the
            values but not their precision).
        index, name, op: the node's position in execution order, layer name and op.
        step: the internal step of a composite op, or None for its output.
        bound: the bound that crosses ``limit`` (the interval's largest magnitude; for
            an underflow, the largest magnitude the node can reach).
        limit: the limit crossed (65504, 32752, 4094 or the subnormal range's top).
        fix: a suggested fix.
    """

    kind: str
    certainty: str
    index: int
    name: str
    op: str
    step: str | None
    bound: float
    limit: float
    fix: str

    @property
    def headline(self) -> str:
        """What happens, without the node: ``may overflow fp16 (|v| > 65504), bound 9e+04``
        (prefixed by the step of a composite op)."""
        head = _HEADLINES[self.kind].format(certainty=self.certainty, limit=_num(self.limit))
        what = f"its step {self.step} " if self.step else ""
        return f"{what}{head}, bound {_num(self.bound)}"

    def __str__(self) -> str:
        return f"%{self.index} '{self.name}' ({self.op}): {self.headline}; fix: {self.fix}"

    def to_record(self) -> dict:
        return {
            "kind": self.kind,
            "certainty": self.certainty,
            "index": self.index,
            "name": self.name,
            "op": self.op,
            "step": self.step,
            "bound": self.bound,
            "limit": self.limit,
            "fix": self.fix,
        }


_HEADLINES = {
    "overflow": "{certainty} overflow fp16 (|v| > {limit})",
    "matmul_saturation": "{certainty} pass the matmul output limit {limit} (becomes inf)",
    "crop_dma": "{certainty} pass the crop-DMA limit {limit} (becomes inf)",
    "nan": "{certainty} produce NaN from NaN-free inputs",
    "underflow": "{certainty} underflow (every value below {limit})",
}


def _num(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else ("inf" if v > 0 else "-inf")


@dataclass(frozen=True)
class NodeInterval:
    """One node's range: ``interval`` holds every value the emulator can give it.

    ``known`` is False when an input without a declared range feeds the node; ``steps``
    are the ``(label, Interval)`` of a composite op's internal steps.
    """

    index: int
    name: str
    op: str
    shape: tuple
    interval: Interval
    known: bool
    steps: tuple = ()

    def to_record(self) -> dict:
        iv = self.interval
        return {
            "index": self.index,
            "name": self.name,
            "op": self.op,
            "shape": list(self.shape),
            "lo": iv.lo,
            "hi": iv.hi,
            "nan": iv.nan,
            "tiny": iv.tiny,
            "known": self.known,
        }


class RangeReport(TableMixin):
    """The result of :func:`range_analysis`: per node its interval, and the hazards.

    Attributes:
        nodes: one :class:`NodeInterval` per node (inputs and compute nodes; weights
            left out), in execution order.
        hazards: the :class:`RangeHazard` list, in execution order.
        unknown_inputs: names of the inputs without a declared range.
        target: the target's name, or None for the generic model.
    """

    def __init__(self, program, nodes, hazards, unknown_inputs, target, intervals, rerun=None):
        self._rerun = rerun  # declared-range scale -> RangeReport (for input_scale)
        self._scale: tuple | None = None
        self.program = program
        self.nodes = tuple(nodes)
        self.hazards = tuple(hazards)
        self.unknown_inputs = tuple(unknown_inputs)
        self.target = target
        self._intervals = intervals
        self._records = {id(program.nodes[n.index]): n for n in self.nodes}

    @property
    def title(self) -> str:
        return f"range analysis: {len(self.nodes)} node(s), {len(self.hazards)} hazard(s)"

    def to_records(self) -> list[dict]:
        return [n.to_record() for n in self.nodes]

    def __getitem__(self, name: str) -> NodeInterval:
        """The record of the node named ``name`` (its layer name)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"range_analysis: no node named {name!r}")

    def interval(self, tensor) -> Interval:
        """The interval of ``tensor`` (a node of the analysed graph, weights included)."""
        try:
            return self._intervals[id(tensor)]
        except KeyError:
            raise OptionError("range_analysis: that tensor is not in the analysed graph") from None

    def record(self, tensor) -> NodeInterval | None:
        """The :class:`NodeInterval` of ``tensor`` (None for a weight or a foreign node)."""
        return self._records.get(id(tensor))

    def by_kind(self, kind: str) -> list[RangeHazard]:
        """The hazards of one kind."""
        return [h for h in self.hazards if h.kind == kind]

    @property
    def will_overflow(self) -> bool:
        """Whether some node certainly overflows (or saturates) for every in-range input."""
        return any(h.certainty == "will" and h.kind != "underflow" for h in self.hazards)

    def flagged_share(self) -> float:
        """The share of compute nodes with an overflow-class hazard (overflow, matmul
        saturation, crop-DMA) of their own: where an overflow can start. Its
        consequences downstream are not counted again (:meth:`unbounded_share` does);
        the false-alarm measure of a clean model."""
        compute = [n for n in self.nodes if n.op != "input"]
        kinds = ("overflow", "matmul_saturation", "crop_dma")
        hit = {h.index for h in self.hazards if h.kind in kinds}
        return len(hit) / len(compute) if compute else 0.0

    def unbounded_share(self) -> float:
        """The share of compute nodes whose interval (or an internal step) reaches past
        65504, for whatever reason: a hazard's own node and everything downstream of it.
        On deep networks the worst case over a box of inputs compounds layer by layer,
        so this is far larger than :meth:`flagged_share` (docs/ranges.md)."""
        compute = [n for n in self.nodes if n.op != "input"]

        def reaches(n):
            return n.interval.max_abs > FP16_MAX or any(s.max_abs > FP16_MAX for _, s in n.steps)

        return sum(map(reaches, compute)) / len(compute) if compute else 0.0

    def max_abs(self) -> float:
        """The largest magnitude any known compute node can reach (inf when one is
        unknown or unbounded)."""
        vals = [n.interval.max_abs if n.known else INF for n in self.nodes if n.op != "input"]
        return max(vals, default=0.0)

    def activations_within(self, limit: float = INT8_ACTIVATION_LIMIT) -> bool:
        """Whether every activation (every compute node's output and internal step) is
        proven to stay within ``limit``: the condition for an int8 program not to
        saturate (ANEForge measured int8 activations saturating past 4094)."""
        for n in self.nodes:
            if n.op == "input":
                continue
            if not n.known or n.interval.nan or n.interval.max_abs > limit:
                return False
            if any(s.max_abs > limit or s.nan for _, s in n.steps):
                return False
        return True

    def input_scale(self) -> int | None:
        """The smallest ``k`` such that scaling every declared input range by ``2**-k``
        (an exact scaling in fp16) leaves no overflow-class hazard: 0 when there is none
        now, None when no ``k <= 24`` removes them (an overflow that does not come from
        the inputs' scale, e.g. a large constant). Computed on first use by re-running
        the analysis on scaled ranges (a binary search, at most 6 runs).

        Example:
            >>> import aneforge as af
            >>> x = af.input((4,), name="x", range=(-1000.0, 1000.0))
            >>> af.range_analysis((x + 60000.0) * 2.0).input_scale() is None
            True
            >>> af.range_analysis(x * 100.0).input_scale()
            1
        """
        if self._scale is None:
            self._scale = (self._search_scale(),)
        return self._scale[0]

    def _overflows(self) -> bool:
        kinds = ("overflow", "matmul_saturation", "crop_dma")
        return any(h.kind in kinds for h in self.hazards)

    def _search_scale(self) -> int | None:
        if not self._overflows():
            return 0
        if self._rerun is None or self._rerun(2.0**-24)._overflows():
            return None
        lo, hi = 0, 24  # scaling by 2**-lo overflows, by 2**-hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self._rerun(2.0**-mid)._overflows() else (lo, mid)
        return hi

    def violations(self, *inputs, fast: bool = True) -> list[tuple[NodeInterval, np.ndarray]]:
        """Run the program on ``inputs`` (fp16-castable arrays, in program order) with the
        analysed target's numerics and return the ``(node, values)`` pairs whose values
        fall outside their interval: empty when the analysis held (its soundness check).
        Inputs outside their declared ranges can of course escape it.

        Example:
            >>> import numpy as np, aneforge as af
            >>> x = af.input((3,), name="x", range=(-1, 1))
            >>> af.range_analysis(af.tanh(x * 3.0)).violations(np.array([-1.0, 0.2, 1.0]))
            []
        """
        by_index = {n.index: n for n in self.nodes}
        bad = []

        def observe(index, node, value):
            rec = by_index.get(index)
            if rec is not None and not (
                rec.interval.contains(value) and rec.interval.rows_hold(value)
            ):
                bad.append((rec, np.array(value)))

        feeds = [
            np.asarray(v).astype(np.float16) if t.dtype == "float16" else integer_feed(v, t)
            for v, t in zip(inputs, self.program.inputs)
        ]
        with np.errstate(all="ignore"):
            execute_fp16(self.program, feeds, fast=fast, target=self.target, observe=observe)
        return bad

    def __str__(self) -> str:
        head = self.title
        if self.unknown_inputs:
            head += f" (no declared range: {', '.join(self.unknown_inputs)})"
        lines = [head] + [f"  {h}" for h in self.hazards]
        if self._overflows():
            k = self.input_scale()
            lines.append(
                "  no power-of-two input scale down to 2**-24 removes the overflow"
                if k is None
                else f"  scaling every declared input range by 2**-{k} removes every overflow"
            )
        return "\n".join(lines)


def range_analysis(out, input_ranges=None, target=None) -> RangeReport:
    """The static value range of every node of ``out`` and its fp16 hazards.

    Args:
        out: a Tensor, a list of Tensors or a compiled Program.
        input_ranges: ``{input name or index: (lo, hi) or max_abs}``; overrides the
            ranges declared with ``af.input(..., range=...)``. Inputs with neither are
            unknown (every fp16 value) and raise no hazard downstream.
        target: a chip or architecture name: adds its cliffs (the matmul output limit,
            the A13/A14 crop-DMA clamp) and its reduction route; None is the generic
            model.

    Returns:
        A :class:`RangeReport`.

    Example:
        >>> import aneforge as af
        >>> x = af.input((4, 8), name="x")
        >>> rep = af.range_analysis(af.sigmoid(x * 4.0), input_ranges={"x": (-1, 1)})
        >>> str(rep.nodes[-1].interval), rep.hazards
        ('[0.01799, 0.9819]', ())
    """
    program = Program.coerce(out, "range_analysis")
    chip = chip_numerics(target)
    declared = _declared(program, input_ranges)
    return _analyse(program, declared, chip, None if target is None else str(target))


def _scaled(declared: dict, scale: float, program=None) -> dict:
    """The declared ranges scaled by ``scale``; integer inputs (ids, masks) keep theirs:
    scaling them is not a fix."""
    keep = {id(t) for t in program.inputs if t.dtype != "float16"} if program else set()
    return {
        k: iv if k in keep else Interval.declared(iv.lo * scale, iv.hi * scale)
        for k, iv in declared.items()
    }


def _index_only(program) -> set[int]:
    """Ids of the integer inputs read only as indices (embedding ids), whose values the
    ranges of the graph do not depend on."""
    read_as: dict[int, set] = {}
    for node in program.nodes:
        uses = get_op(node.op).int_inputs
        for k, s in enumerate(node.srcs):
            if s.op == "input":
                read_as.setdefault(id(s), set()).add(uses.get(k, "fp16"))
    return {k for k, used in read_as.items() if used == {"index"}}


def _declared(program, given) -> dict[int, Interval]:
    """{id(input): Interval} of the inputs with a range, declared or given here."""
    out = {
        id(t): _input_interval(t, *t.attrs["range"]) for t in program.inputs if "range" in t.attrs
    }
    if not given:
        return out
    names = {t.name: t for t in program.inputs if t.name}
    for key, value in dict(given).items():
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not 0 <= int(key) < len(program.inputs):
                raise OptionError(
                    f"input_ranges: index {key} is out of range; the program has "
                    f"{len(program.inputs)} input(s)"
                )
            node = program.inputs[int(key)]
        elif key in names:
            node = names[key]
        else:
            known = ", ".join(repr(n) for n in names) or "none named"
            raise OptionError(
                f"input_ranges: no input {key!r}; give an input name ({known}) or index"
            )
        lo, hi = check_range(value, f"input_ranges[{key!r}]", OptionError)
        out[id(node)] = _input_interval(node, lo, hi)
    return out


def _input_interval(t, lo: float, hi: float) -> Interval:
    """The values input ``t`` declared in ``[lo, hi]`` holds: what the engine's fp16
    input cast makes of them, or, for an integer input, the whole numbers themselves."""
    return Interval.declared(lo, hi) if t.dtype == "float16" else Interval(float(lo), float(hi))


# ---- the walk -------------------------------------------------------------------------


def _analyse(program, declared, chip, target_name, weights=None) -> RangeReport:
    """One walk. ``weights`` caches the weights' intervals (by node id) across the
    re-runs :meth:`RangeReport.input_scale` makes."""
    weights = {} if weights is None else weights
    names = program.layer_names
    mm = chip.matmul(gemm_reference) if chip is not None else gemm_reference
    limit = chip.matmul_limit if chip is not None else None
    route = chip.route if chip is not None else None
    crop = chip.crop_dma_limit if chip is not None else None
    intervals: dict[int, Interval] = {}
    known: dict[int, bool] = {}
    records, hazards = [], []
    with np.errstate(all="ignore"):
        for i, node in enumerate(program.nodes):
            name = names.get(id(node), f"%{i}")
            if node.op == "weight":
                if id(node) not in weights:
                    weights[id(node)] = _rule(node)(node, [], None)
                intervals[id(node)] = weights[id(node)]
                known[id(node)] = True
                continue
            if node.op == "input":
                iv = declared.get(id(node))
                known[id(node)] = iv is not None
                intervals[id(node)] = iv if iv is not None else Interval.unknown()
                records.append(
                    NodeInterval(i, name, "input", node.shape, intervals[id(node)], iv is not None)
                )
                continue
            srcs = [intervals[id(s)] for s in node.srcs]
            env = RangeEnv(mm=mm, plain_mm=gemm_reference, matmul_limit=limit, route=route)
            iv = _rule(node)(node, srcs, env)
            index = get_op(node.op).int_inputs  # ids pick values: theirs do not matter
            is_known = all(known[id(s)] for k, s in enumerate(node.srcs) if k not in index)
            found = []
            if crop is not None and is_width_offset(node):
                iv, found = _crop(iv, crop, srcs)
            if is_known:
                found = found + _hazards(node, srcs, iv, env, cliffs=bool(found))
                hazards.extend(
                    _describe(kind, cert, i, name, node, step, bound, lim)
                    for kind, cert, step, bound, lim in found
                )
            intervals[id(node)] = iv
            known[id(node)] = is_known
            records.append(
                NodeInterval(i, name, node.op, node.shape, iv, is_known, tuple(env.steps))
            )
    ids = _index_only(program)
    unknown = [names.get(id(t), "?") for t in program.inputs if id(t) not in declared.keys() | ids]

    def rerun(scale):
        return _analyse(program, _scaled(declared, scale, program), chip, target_name, weights)

    return RangeReport(program, records, hazards, unknown, target_name, intervals, rerun)


def _rule(node):
    rule = get_op(node.op).range
    if rule is None:  # the registry test forbids it; keep the analysis sound regardless
        return lambda node, srcs, env: Interval.unknown()
    return rule


def _crop(iv: Interval, limit: float, srcs) -> tuple[Interval, list]:
    if iv.max_abs <= limit:
        return iv, []
    bound = srcs[0].max_abs
    cert = "will" if iv.lo > limit or iv.hi < -limit else "may"
    lo = -INF if iv.lo < -limit else iv.lo
    hi = INF if iv.hi > limit else iv.hi
    return Interval(lo, hi, iv.nan), [("crop_dma", cert, None, bound, limit)]


def _hazards(node, srcs, iv, env, cliffs: bool = False) -> list:
    """(kind, certainty, step, bound, limit) of every hazard the node itself creates;
    ``cliffs``: a target cliff already explains the node's infinite output."""
    found = []
    srcs_finite = all(s.max_abs <= FP16_MAX for s in srcs)
    if srcs_finite:
        for label, step in env.steps:  # the first step that overflows: later ones follow
            if step.max_abs > FP16_MAX:
                found.append(
                    ("overflow", _certainty(step, FP16_MAX), label, step.max_abs, FP16_MAX)
                )
                break
        for kind, cert, bound, limit in env.cliffs():
            found.append((kind, cert, None, bound, limit))
        cliffs = cliffs or any(k == "matmul_saturation" for k, *_ in found)
        if iv.max_abs > FP16_MAX and not cliffs:
            found.append(("overflow", _certainty(iv, FP16_MAX), None, iv.max_abs, FP16_MAX))
    step_overflow = any(step is not None for _, _, step, _, _ in found)  # NaN follows it
    if iv.nan and not any(s.nan for s in srcs) and srcs_finite and not step_overflow:
        found.append(("nan", "may", None, iv.max_abs, FP16_MAX))
    biggest = max((s.max_abs for s in srcs), default=0.0)
    # a product under the subnormal range is an underflow (a difference that comes out 0
    # is an exact cancellation, not one)
    flags = get_op(node.op).flags
    shrinks = Flag.MULTIPLIES in flags or Flag.CONTRACTION in flags
    if shrinks and biggest >= SMALLEST_NORMAL and iv.max_abs < SMALLEST_NORMAL and not iv.nan:
        cert = "will" if iv.is_zero else "subnormal"
        found.append(("underflow", cert, None, iv.max_abs, SMALLEST_NORMAL))
    return found


def _certainty(iv: Interval, limit: float) -> str:
    return "will" if iv.lo > limit or iv.hi < -limit else "may"


def _describe(kind, cert, index, name, node, step, bound, limit) -> RangeHazard:
    return RangeHazard(
        kind, cert, index, name, node.op, step, bound, limit, _fix(kind, node, step, bound, limit)
    )


def _fix(kind, node, step, bound, limit) -> str:
    """A suggested fix for one hazard."""
    op = node.op
    scale = limit / bound if bound and math.isfinite(bound) and bound > limit else None
    by = f" by {scale:.3g} or less" if scale else ""
    if kind == "underflow":
        return (
            f"scale the values feeding {op} up (or fold the small factor into a later "
            "op) so they stay above 6.1e-05"
        )
    if kind == "nan":
        return (
            f"keep {op}'s inputs inside its domain (no inf - inf, no 0 * inf, no log or "
            "sqrt of a negative)"
        )
    if kind == "crop_dma":
        return f"scale the sliced tensor down{by} before the slice, or slice from the width origin"
    if kind == "matmul_saturation":
        return f"scale an operand of {op} down{by} (outputs past 32752 saturate) and undo it after"
    record = get_op(op)
    if step is not None and Flag.SCALE_INVARIANT in record.flags:
        return (
            f"pre-scale: {op} does not depend on its input's scale, so multiply its input "
            "by a power of two 2**-k first (RangeReport.input_scale() finds k)"
        )
    if record.overflow_fix is not None:
        return record.overflow_fix.format(op=op, by=by)
    return f"scale the inputs down{by} (RangeReport.input_scale() finds the power of two)"
