"""``precision_risk``: a static pattern matcher for the fp16 failure modes of a graph.

The precision risk model of the optimizer and cost-model source (docs/sources.md): a
cheap structural pass, not an error bound. Every flagged node gets an order-of-magnitude
error proxy in [0, 1]; the graph's ``signal`` is the largest proxy among the reliable,
default signals (the ``hotspots``). Modes:

- ``narrow_sum``: a narrow fp16 reduction over a long run of terms: explicit ``sum``
  and ``mean`` nodes (mean is the same narrow sum divided once by the count, with the
  same relative error) and the narrow sums inside ``softmax``, sdpa's softmax, the layer,
  rms, group and l2 norms, ``avg_pool`` windows and ``cost_volume`` (docs/numerics.md,
  section 4). Flagged when the proxy exceeds its value at the spec's 256-term floor
  (:data:`_NARROW_SUM_FLOOR`), i.e. for a sequential sum of more than 256 terms.
  Possibly-signed sums are hotspots (the spec's reduce_sum signal; the fix is the
  lossless ``af.reduce_sum_to_matmul`` rewrite). Same-sign sums (over a non-negative
  producer, or softmax's exp and the norms' squares) are informational, as the spec
  exempts them, until a sequential run passes ``2**10`` terms (:data:`_DRIFT_LENGTH`),
  where they become hotspots too (below).
- ``cancel_sub``: a subtract whose operands are likely large and nearly equal (both
  computed from a shared input, or a constant minus a saturating unit-range function
  such as ``1 - erf(x)``). Data-dependent, so informational only.
- ``range``: a hazard of :func:`aneforge.range_analysis` from the inputs' declared
  ranges (``af.input(..., range=...)`` or ``input_ranges=``): a node or an internal step
  that *will* overflow (or saturate, or flush to zero) has proxy 1.0, one that *may*
  has 0.5; a value left in the subnormal range is informational. Graphs whose inputs
  declare no range get no range flags (nothing is assumed about unknown inputs).
- ``compile_cliff``: an op whose lowering tiles its reduction into a fixed layout
  (its record's ``tiled``: ``group_norm`` reduces over ``[1, G, C/groups, H*W]``) falls
  off a cliff past the layout's axis limit (65536; proxy 1). The emulator does not model
  the cliff, so this mode is not calibrated.
- ``attribute``: a float attribute the engine holds in fp16 (an eps, a scale, a
  radius...) that fp16 turns into 0 or into a subnormal more than 2**-8 off
  (:func:`aneforge.graph.registry.held_roundings`; building such a node warns once when
  the value was given). ``layer_norm(eps=1e-12)`` computes with eps 0, so a
  zero-variance row gives NaN. Certain, but whether it matters depends on the data:
  informational (proxy 0), yet listed even without ``verbose``.

Informational nodes are listed only with ``verbose=True`` (attribute roundings always)
and never enter the signal or the warning.

The narrow-sum proxy (calibrated: ``bench/precision_calibration.py`` prints the table,
``tests/analysis/test_precision_risk.py`` holds it). Each partial sum of the narrow
accumulator rounds to fp16, an error of at most ``u = 2**-11`` (fp16's unit roundoff)
relative to the running sum. Those errors add as a random walk, so relative to the
result the error grows as ``sqrt(K) * u``: measured 0.25-0.5x that for N(0, 1) terms.
The spec's ``sqrt(K) * fp16_eps`` with eps ``2**-10`` sits 4-8x above the measurements
there, near the edge of the factor-10 window, so ``u`` is used. Two limiting cases:

- zero-mean terms: ``p_signed = min(1, sqrt(L) * u)``, a pure random walk.
- same-sign terms: ``p_same = min(1, sqrt(L') * u * max(1, run / 2**11))``. A same-sign
  partial sum grows as K, and once it holds ``2**11`` mean terms
  (:data:`_STALL_LENGTH`) its half-ulp is a mean term: further terms round away and the
  sum stalls (4096 ones sum to 2048; measured 0.2 to >= 1 at K = 16384), a drift growing
  with the run. The spec's exemption ("a sum over it doesn't cancel") therefore does
  not hold on the generic sequential model: below the stall same-sign sums lose digits
  at the same ``sqrt(K)`` rate as signed ones. Past ``2**10`` mean terms the ulp of the
  partial sum is a whole mean term, so each term rounds to a multiple of its own size: a
  drift sets in (measured 1e-2 to 9e-2 at K = 2048, the tuner's noise being 5e-3), and
  there the exemption ends for the default signal too.

A same-sign sum takes ``p_same``; a possibly-signed one may have a zero mean or a
dominant one, so it takes the geometric mean ``sqrt(p_signed * p_same)``, within the
square root of their ratio of either case.

Effective lengths: ``L = L' = K`` and ``run = K`` for a sequential sum (the generic model,
or ``K <= R`` on a target with reduction route R). On a split route with
``n = ceil(K/R)`` chunks (docs/numerics.md 9.2), ``L = R + n`` (the chunk errors and the
partials' sum each random-walk), ``L' = (sqrt(R/n) + sqrt(n))**2`` (the n same-sign chunk
errors average down) and ``run = max(R, n)``. So on every target (R <= 384) long
same-sign sums stay unflagged, as the spec intends (measured <= 6e-3 to K = 16384).

Example:
    >>> import aneforge as af
    >>> x = af.input((4, 4096), name="x")
    >>> rep = precision_risk(x.sum(-1))
    >>> [(e.op, e.mode, round(e.proxy, 4)) for e in rep.hotspots]
    [('sum', 'narrow_sum', 0.0442)]
    >>> rep.signal > 1e-3
    True
    >>> precision_risk(af.reduce_sum_to_matmul(x.sum(-1))).signal
    0.0
    >>> e = x.exp().sum(-1)  # same-sign: a hotspot once the run drifts (> 2**10 terms)
    >>> [(n.op, n.informational) for n in precision_risk(e, verbose=True).nodes]
    [('sum', False)]
    >>> precision_risk(e, verbose=True, target="M5").nodes  # split route: short runs
    ()
    >>> y = af.input((4, 1024))
    >>> [(n.op, n.informational) for n in precision_risk(y.exp().sum(-1), True).nodes]
    [('sum', True)]
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from ..compiler.program import Program
from ..emulator.chips import chip_numerics
from ..errors import AneforgeError, OptionError, PrecisionWarning
from ..graph.facts import Flag, TermSign
from ..graph.registry import get_op, held_roundings
from ..tables import TableMixin
from ..targets.names import resolve_target
from .divergence import narrow_terms
from .ranges import range_analysis

#: A clean fused fp16 op's relative error (the specification's corpus median;
#: docs/numerics.md); the warning fires when the signal exceeds it.
_FP16_CLEAN = 1e-3
#: Possibly-signed narrow sums over more terms than this are flagged (docs/numerics.md,
#: "Which narrow sums").
_NARROW_SUM_FLOOR = 256
#: A same-sign sequential run this long holds a partial sum whose half-ulp is a mean term.
_STALL_LENGTH = 2**11
#: Past this run, a same-sign partial sum's ulp is a mean term: such sums are hotspots.
_DRIFT_LENGTH = 2**10
#: The eps of the proxy: fp16's unit roundoff (half the 2**-10 machine epsilon).
_UNIT_ROUNDOFF = 2.0**-11

#: Every mode, in the order reports list them.
MODES = ("narrow_sum", "range", "compile_cliff", "cancel_sub", "attribute")


class PrecisionError(AneforgeError, ValueError):
    """A graph's precision risk signal exceeds fp16 noise and strict checking is on."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class NodeRisk:
    """One flagged node.

    Attributes:
        index: the node's position in the program's execution order.
        op, shape: the node's op and output shape.
        mode: one of :data:`MODES`.
        proxy: the order-of-magnitude relative error proxy, in [0, 1].
        terms: the narrow sum's term count K (narrow_sum), the longest reduced axis
            (compile_cliff), None for cancel_sub.
        informational: True for cancel_sub and for same-sign narrow sums whose runs
            stay within :data:`_DRIFT_LENGTH`: listed with ``verbose=True`` only, never
            in the signal.
        detail: one sentence saying why.
        fix: what to do about it.
    """

    index: int
    op: str
    shape: tuple[int, ...]
    mode: str
    proxy: float
    terms: int | None
    informational: bool
    detail: str
    fix: str

    def __str__(self) -> str:
        tag = " (informational)" if self.informational else ""
        return (
            f"%{self.index} {self.op} {self.shape}: {self.mode}{tag} proxy {self.proxy:.2g}"
            f" - {self.detail}; fix: {self.fix}"
        )

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "op": self.op,
            "shape": list(self.shape),
            "mode": self.mode,
            "proxy": self.proxy,
            "terms": self.terms,
            "informational": self.informational,
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class PrecisionReport(TableMixin):
    """The result of :func:`precision_risk`.

    Attributes:
        signal: the largest proxy among the hotspots (0.0 when there are none).
        nodes: the flagged nodes in execution order; informational ones only when the
            report was made with ``verbose=True``.
        hotspots: the reliable default signals (narrow_sum, compile_cliff), largest
            proxy first.
        target: the architecture whose reduction route was assumed (None: generic).
        verbose: whether informational flags are listed.
    """

    signal: float
    nodes: tuple[NodeRisk, ...]
    hotspots: tuple[NodeRisk, ...]
    target: str | None
    verbose: bool

    @property
    def clean(self) -> bool:
        """True when the signal stays within fp16 noise (:data:`_FP16_CLEAN`)."""
        return self.signal <= _FP16_CLEAN

    def by_mode(self, mode: str) -> list[NodeRisk]:
        """The listed nodes of ``mode``."""
        if mode not in MODES:
            raise OptionError(f"unknown precision risk mode {mode!r}; modes are {MODES}")
        return [e for e in self.nodes if e.mode == mode]

    def as_dict(self) -> dict:
        return {
            "signal": self.signal,
            "target": self.target,
            "hotspots": [e.as_dict() for e in self.hotspots],
            "nodes": [e.as_dict() for e in self.nodes],
        }

    @property
    def title(self) -> str:
        """The report's headline (the first line of ``str(report)``)."""
        return str(self).split("\n", 1)[0]

    def to_records(self) -> list[dict]:
        """One row of plain values per listed node; with ``TableMixin`` the report
        renders as an HTML table in a notebook and a rich table in a terminal.

        Example:
            >>> import aneforge as af
            >>> x = af.input((8, 4096), name="x")
            >>> rows = af.precision_risk(x.sum(-1)).to_records()
            >>> rows[0]["op"], rows[0]["mode"], rows[0]["terms"]
            ('sum', 'narrow_sum', 4096)
        """
        return [
            {
                "node": f"%{e.index}",
                "op": e.op,
                "shape": "x".join(map(str, e.shape)),
                "mode": e.mode,
                "proxy": e.proxy,
                "terms": e.terms,
                "informational": e.informational,
                "detail": e.detail,
                "fix": e.fix,
            }
            for e in self.nodes
        ]

    def __str__(self) -> str:
        where = self.target or "generic model"
        state = "clean" if self.clean else "exceeds fp16 noise"
        head = (
            f"precision risk ({where}): signal {self.signal:.2g} ({state}, noise "
            f"{_FP16_CLEAN:g}), {len(self.hotspots)} hotspot(s)"
        )
        return "\n".join([head] + [f"  {e}" for e in self.nodes])


def precision_risk(out, verbose: bool = False, target=None, input_ranges=None) -> PrecisionReport:
    """Flag the nodes of ``out`` likely to lose accuracy in fp16, without data.

    Args:
        out: a Tensor, a list of Tensors or a compiled Program.
        verbose: also list the informational flags (cancel_sub, short same-sign sums).
        target: the engine target whose reduction route to assume (an architecture or
            chip name); default the Program's own target, else the generic model.
        input_ranges: ``{input name or index: (lo, hi) or max_abs}`` for the range
            hazards, on top of the ranges the inputs declare (:func:`range_analysis`).

    Returns:
        A :class:`PrecisionReport` (module docstring: the modes and the calibration).
    """
    program = Program.coerce(out, "precision_risk")
    arch, route = _route(program, target)
    nonneg: dict[int, bool] = {}
    ancestry: dict[int, frozenset] = {}
    entries = []
    for i, node in enumerate(program.nodes):
        if node.op in ("input", "weight"):
            continue
        for found in (_narrow_sum(node, route, nonneg), _cliff(node), _cancel(node, ancestry)):
            if found is not None:
                mode, proxy, terms, info, detail, fix = found
                entries.append(
                    NodeRisk(i, node.op, node.shape, mode, proxy, terms, info, detail, fix)
                )
        entries += _attribute_risks(i, node)
    entries += _range_risks(program, arch, input_ranges)
    entries.sort(key=lambda e: e.index)
    hot = sorted((e for e in entries if not e.informational), key=lambda e: -e.proxy)
    listed = tuple(e for e in entries if verbose or not e.informational or e.mode == "attribute")
    signal = max((e.proxy for e in hot), default=0.0)
    return PrecisionReport(float(signal), listed, tuple(hot), arch, bool(verbose))


def check_precision(program, strict: bool = False, stacklevel: int = 3) -> PrecisionReport:
    """Run :func:`precision_risk` on ``program``; warn once (or raise) past fp16 noise.

    When the signal exceeds :data:`_FP16_CLEAN` it warns one ``PrecisionWarning`` naming
    the hotspots (:func:`precision_message`), or with ``strict=True`` raises
    :class:`PrecisionError` (carrying the report). Returns the report; it writes nothing
    into ``program`` (a compiled program has it in ``prog.passes['precision']``).
    ``stacklevel`` points the warning at the caller's caller (user -> compile -> here).
    """
    report = precision_risk(program)
    if report.clean:
        return report
    message = precision_message(report)
    if strict:
        raise PrecisionError(message, report)
    warnings.warn(message, PrecisionWarning, stacklevel=stacklevel)
    return report


def precision_message(report: PrecisionReport) -> str:
    """The one warning line of a report past fp16 noise: the signal, the first three
    hotspots, the first fix and where to look further.

    Example:
        >>> import aneforge as af
        >>> rep = precision_risk(af.input((4096,)).sum())
        >>> precision_message(rep).startswith("precision risk signal")
        True
    """
    shown = "; ".join(
        f"%{e.index} {e.op} {e.shape} {e.mode} ~{e.proxy:.2g}" for e in report.hotspots[:3]
    )
    more = f" and {len(report.hotspots) - 3} more" if len(report.hotspots) > 3 else ""
    return (
        f"precision risk signal {report.signal:.2g} exceeds fp16 noise ({_FP16_CLEAN:g}): "
        f"{shown}{more}. Fix: {report.hotspots[0].fix}. Details: af.precision_risk(out)"
    )


# ---- attributes fp16 rounds away ------------------------------------------------------


def _attribute_risks(index: int, node) -> list[NodeRisk]:
    """The held float attributes of ``node`` that fp16 turns into 0 or a coarse
    subnormal, as informational entries (listed by default: they are certain).

    Example:
        >>> import warnings, aneforge as af
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     y = af.layer_norm(af.input((2, 8)), eps=1e-12)
        >>> (e,) = precision_risk(y).by_mode("attribute")
        >>> e.op, e.informational, e.detail[:31]
        ('layer_norm', True, 'layer_norm: eps=1e-12 is 0 in f')
    """
    return [
        NodeRisk(
            index,
            node.op,
            node.shape,
            "attribute",
            0.0,
            None,
            True,
            r.detail,
            r.fix,
        )
        for r in held_roundings(get_op(node.op), node.attrs)
    ]


# ---- range hazards --------------------------------------------------------------------

#: The proxy of a range hazard by certainty: a value that certainly becomes inf (or 0)
#: has lost everything; one that may has a fair chance to.
_RANGE_PROXY = {"will": 1.0, "may": 0.5, "subnormal": 0.0}


def _range_risks(program, arch, input_ranges) -> list[NodeRisk]:
    """The range hazards as risk entries; none unless some input declares a range (a
    graph of constants alone is not analysed either: its intervals lose the relations
    between its values, so they would flag what cannot happen)."""
    declared = any("range" in t.attrs for t in program.inputs)
    if not (declared or input_ranges):
        return []
    report = range_analysis(program, input_ranges=input_ranges, target=arch)
    shapes = {i: n.shape for i, n in enumerate(program.nodes)}
    return [
        NodeRisk(
            h.index,
            h.op,
            shapes[h.index],
            "range",
            _RANGE_PROXY[h.certainty],
            None,
            h.certainty == "subnormal",
            h.headline,
            h.fix,
        )  # fmt: skip
        for h in report.hazards
    ]


# ---- inputs --------------------------------------------------------------------------


def _route(program, target):
    """(architecture or None, reduction route or None) for ``target`` / the program's."""

    chosen = program.target if target is None else target
    if chosen is None:
        return None, None
    if isinstance(chosen, str) and chosen.strip().lower() == "generic":
        return None, None
    tgt = resolve_target(chosen)
    chip = chip_numerics(tgt)  # family 1 raises PreflightError (no MIL path)
    return tgt.arch, chip.route


# ---- (a) narrow sums -----------------------------------------------------------------


def _postorder_memo(node, memo: dict, rule):
    """``rule(n, memo)`` for ``node`` and every ancestor not yet in ``memo``, sources
    first, iteratively (deep graphs are fine); returns ``memo[id(node)]``."""
    stack = [node]
    while stack:
        cur = stack[-1]
        if id(cur) in memo:
            stack.pop()
            continue
        pending = [s for s in cur.srcs if id(s) not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[id(cur)] = rule(cur, memo)
    return memo[id(node)]


def _nonnegative(node, memo: dict[int, bool]) -> bool:
    """Whether every value of ``node`` is >= 0 (or nan) by construction."""
    return _postorder_memo(node, memo, _nonnegative_rule)


def _nonnegative_rule(node, memo) -> bool:
    """One node's rule (its record's ``sign``); ``memo`` already holds its sources."""
    return bool(get_op(node.op).sign(node, [memo[id(s)] for s in node.srcs]))


def _same_sign(node, memo) -> bool:
    """Whether ``node``'s narrow sum adds terms of one sign (its record's ``narrow``)."""
    sign = get_op(node.op).narrow.sign
    if sign is TermSign.OF_INPUT:
        return _nonnegative(node.srcs[0], memo)
    return sign is TermSign.SAME


def effective_length(terms: int, route: int | None, same_sign: bool) -> tuple[float, int]:
    """(effective length, longest sequential run) of a narrow sum of ``terms`` terms.

    Sequential (generic model, or ``terms <= route``): K. Split into ``n`` chunks of
    ``route`` terms: ``route + n`` for zero-mean terms, ``(sqrt(route/n) + sqrt(n))**2``
    for same-sign ones (module docstring).

    Example:
        >>> effective_length(16384, None, False), effective_length(16384, 384, False)
        ((16384.0, 16384), (427.0, 384))
    """
    k = int(terms)
    if route is None or k <= route:
        return float(k), k
    n = -(-k // route)
    run = max(route, n)
    if same_sign:
        return (math.sqrt(route / n) + math.sqrt(n)) ** 2, run
    return float(route + n), run


def _limit_proxy(terms: int, route: int | None, same_sign: bool) -> float:
    length, run = effective_length(terms, route, same_sign)
    stall = max(1.0, run / _STALL_LENGTH) if same_sign else 1.0
    return min(1.0, math.sqrt(length) * _UNIT_ROUNDOFF * stall)


def narrow_sum_proxy(terms: int, route: int | None = None, same_sign: bool = False) -> float:
    """The narrow-sum error proxy of ``terms`` terms (module docstring).

    Same-sign terms: ``p_same``; possibly-signed ones: ``sqrt(p_signed * p_same)``.

    Example:
        >>> round(narrow_sum_proxy(1024), 4), narrow_sum_proxy(16384, same_sign=True)
        (0.0156, 0.5)
    """
    same = _limit_proxy(terms, route, True)
    if same_sign:
        return float(same)
    return float(math.sqrt(_limit_proxy(terms, route, False) * same))


#: The narrow-sum proxy at the spec's floor: a sequential sum of 256 terms (2**-7).
_PROXY_FLOOR = math.sqrt(_NARROW_SUM_FLOOR) * _UNIT_ROUNDOFF


def _narrow_sum(node, route, memo):
    terms = narrow_terms(node)
    if terms is None:
        return None
    limit = _PROXY_FLOOR * (1 + 1e-12)
    both = {same: narrow_sum_proxy(terms, route, same) for same in (False, True)}
    if max(both.values()) <= limit:
        return None  # unflagged either way: no need to look at the terms' sign
    same = _same_sign(node, memo)
    proxy = both[same]
    if proxy <= limit:
        return None
    length, run = effective_length(terms, route, same)
    drifts = same and run > _DRIFT_LENGTH
    kind = "same-sign" if same else "possibly-signed"
    path = "sequential" if route is None or terms <= route else f"split route {route}"
    detail = f"narrow fp16 sum of {terms} {kind} terms ({path}, effective length {length:.0f})"
    if run > _STALL_LENGTH and same:
        detail += f"; a {run}-term same-sign run stalls past {_STALL_LENGTH} terms"
    elif drifts:
        detail += f"; a {run}-term same-sign run drifts past {_DRIFT_LENGTH} terms"
    elif same:
        detail += f"; same-sign: left out of the default signal up to {_DRIFT_LENGTH} terms"
    fix = get_op(node.op).narrow.fix
    return "narrow_sum", proxy, int(terms), same and not drifts, detail, fix


# ---- (c) compile cliffs --------------------------------------------------------------


def _cliff(node):
    """A compile cliff of an op whose lowering tiles its reduction (``OpDef.tiled``)."""
    tiled = get_op(node.op).tiled
    if tiled is None:
        return None
    in_shapes = [s.shape for s in node.srcs]
    longest = tiled.longest(in_shapes, node.attrs)
    if longest <= tiled.limit:
        return None
    lengths = ", ".join(f"{label}={n}" for label, n in tiled.axes(in_shapes, node.attrs))
    detail = (
        f"{node.op}'s tiled lowering reduces over {tiled.layout} ({lengths}); an axis over "
        f"{tiled.limit} falls off the compile cliff"
    )
    return "compile_cliff", 1.0, longest, False, detail, tiled.fix


# ---- (b) cancellation subtracts (informational) ---------------------------------------


def _inputs_of(node, memo: dict[int, frozenset]) -> frozenset:
    """The ids of the graph inputs ``node`` depends on (memoized)."""

    def rule(cur, memo):
        own = frozenset({id(cur)}) if cur.op == "input" else frozenset()
        return own.union(*(memo[id(s)] for s in cur.srcs))

    return _postorder_memo(node, memo, rule)


def _is_constant(t) -> bool:
    return t.op == "weight"


def _cancel(node, memo: dict[int, frozenset]):
    if node.op != "sub":
        return None
    a, b = node.srcs
    saturating = (_is_constant(a) and _saturates(b)) or (_is_constant(b) and _saturates(a))
    if saturating:
        f = b if _is_constant(a) else a
        why = f"a constant minus {f.op}(...), which saturates at +-1: the result cancels there"
    else:
        if _is_constant(a) or _is_constant(b) or _centering(a, b):
            return None
        shared = _inputs_of(a, memo) & _inputs_of(b, memo)
        if not shared:
            return None
        why = (
            f"both operands ({a.op}, {b.op}) are computed from the same input(s), so they "
            "can be large and nearly equal (a CFG-style difference, a residual)"
        )
    detail = why + "; the loss u*(|a|+|b|)/|a-b| is data-dependent (proxy: fp16 noise, a floor)"
    fix = (
        "a paired-fp16 subtract (af.paired_subtract) if the operands carry sub-ulp bits; "
        "check with data"
    )
    return "cancel_sub", _FP16_CLEAN, None, True, detail, fix


def _saturates(t) -> bool:
    """A producer of unit-range values whose complement 1 - f(x) cancels where f
    saturates (its record's ``Flag.SATURATES``)."""
    return Flag.SATURATES in get_op(t.op).flags


def _centering(a, b) -> bool:
    """x - stat(x): subtracting a statistic of the other operand (mean, max) is benign."""
    pairs = ((a, b), (b, a))
    return any(
        Flag.STATISTIC in get_op(s.op).flags and bool(s.srcs) and s.srcs[0] is x for x, s in pairs
    )
