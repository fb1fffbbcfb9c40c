"""A compiled program: the graph's nodes in execution order, ready to run or inspect.

A :class:`Program` is immutable once built: its fields (outputs, nodes, opt, target,
output names and the :class:`PassReport` of the passes that made it) are set at
construction, and a changed program is a new one (:meth:`Program.replace`). Views
derived from the nodes (regions, layer names) are computed once, on first use; caches
that depend on more than the program (the cost model's estimates) live outside it.

Every node has a layer name (:attr:`Program.layer_names`, from
:func:`aneforge.graph.naming.layer_names`): the name it was given, else ``{op}_{k}``;
unique within the program and the same in every process.

Example:
    >>> import aneforge as af
    >>> x = af.input((4,), name="x")
    >>> prog = af.compile(x.exp().relu(name="act"))
    >>> [prog.layer_name(n) for n in prog.compute_nodes]
    ['exp_0', 'act']
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

import numpy as np

from ..compression import weight_stream_bytes_exact
from ..devices import get_device
from ..emulator.convert import to_fp16
from ..emulator.trace import trace
from ..errors import DTypeError, InputError, OptionError, PrecisionWarning
from ..graph.naming import layer_names, user_name
from ..graph.registry import get_op
from ..graph.rewrite import BIT_IDENTICAL
from ..graph.tensor import Tensor, integer_feed
from ..graph.walk import as_outputs, topological_order
from .segment import segment

#: Exporters by format, registered by the layers that write them (``io`` registers
#: ``"coreml"``); :meth:`Program.export_coreml` looks its writer up here, so the IR
#: does not import the exporters above it.
EXPORTERS: dict = {}


def register_exporter(fmt: str, writer) -> None:
    """Make ``Program.export_<fmt>`` call ``writer(program, path, **options)``.

    Example:
        >>> from aneforge.compiler.program import EXPORTERS
        >>> "coreml" in EXPORTERS  # registered by aneforge.io when aneforge is imported
        True
    """
    if fmt in EXPORTERS and EXPORTERS[fmt] is not writer:
        raise OptionError(f"an exporter for '{fmt}' is already registered")
    EXPORTERS[fmt] = writer


@dataclass(frozen=True)
class PassRecord:
    """What one pass did when it ran.

    Attributes:
        id: the pass's namespaced id (``'route::select'``).
        entries: the ``prog.passes`` entries it wrote (key -> report), read-only.
        warnings: the warnings it issued, ``(category, message)`` pairs, in order.
        exactness: the weakest exactness class of what it applied
            (:data:`~aneforge.graph.rewrite.EXACTNESS`; ``'bit-identical'`` for a check).
        noop: why it changed nothing, when it had nothing to do (else None).

    Example:
        >>> PassRecord("check::precision", {"precision": {"signal": 0.0}}).entries["precision"]
        {'signal': 0.0}
    """

    id: str
    entries: Mapping = field(default_factory=dict)
    warnings: tuple = ()
    exactness: str = BIT_IDENTICAL
    noop: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "entries", MappingProxyType(dict(self.entries)))
        object.__setattr__(self, "warnings", tuple(self.warnings))


@dataclass(frozen=True)
class PassReport:
    """The passes that made a program: the pipeline's name, one :class:`PassRecord` per
    pass that ran (in order) and the tuner's report (None unless it was tuned).

    Example:
        >>> rep = PassReport("O0", (PassRecord("check::precision", {"precision": {}}),))
        >>> rep.ran, dict(rep.entries)
        (('check::precision',), {'precision': {}})
    """

    pipeline: str | None = None
    records: tuple = ()
    tune: Mapping | None = None

    def __post_init__(self):
        object.__setattr__(self, "records", tuple(self.records))

    @property
    def ran(self) -> tuple[str, ...]:
        """The ids of the passes that ran, in order."""
        return tuple(r.id for r in self.records)

    @cached_property
    def entries(self) -> Mapping:
        """Every record's entries merged in run order (a later pass's entry for a key
        replaces an earlier one's), read-only: this is ``prog.passes``."""
        merged: dict = {}
        for record in self.records:
            merged.update(record.entries)
        return MappingProxyType(merged)

    @property
    def warnings(self) -> tuple:
        """``(pass id, category, message)`` for every warning the passes issued."""
        return tuple((r.id, cat, msg) for r in self.records for cat, msg in r.warnings)


#: The report of a program no pass touched.
NO_PASSES = PassReport()


@dataclass(frozen=True, eq=False)
class Program:
    """An executable graph: nodes in a deterministic topological order. Immutable.

    Call it like a function: ``prog(*arrays, **named)`` takes inputs in creation order
    (or by name, or as one dict of them by name), checks their shapes, casts them to
    fp16, runs on the device (the emulator by default) and returns float32 arrays (a
    tuple for several outputs).

    Attributes:
        outputs: the output tensors, in the order given to :func:`compile`.
        nodes: every node, sources included, in execution order (a tuple).
        opt: the optimization level it was compiled at.
        target: the :class:`~aneforge.targets.table.Target` it was compiled for (None:
            chip-independent). Running it on the emulator uses that target's per-chip
            numerics unless the device overrides them.
        output_names: one name (or None) per output: ``compile(output_names=...)``, else
            the names the output tensors had when they were given to :func:`compile`
            (an optimizer pass may replace an output node; its name stays here). The
            Core ML export names its outputs by them.
        report: the :class:`PassReport` of the passes that made it; ``passes`` (its
            merged entries, read-only) and ``tune_report`` (the tuner's report, or
            None) are views of it.
        placements: the placement vectors its fused regions run with on the emulator,
            ``((region index, ('inline' | 'materialize', ...)), ...)`` sorted by index,
            one entry per intermediate (:mod:`aneforge.kernel.lower`); a region not
            named runs with the default (:func:`aneforge.kernel.compiled.
            default_placement`). ``af.tune`` on the emulator sets them
            (:meth:`with_placements`); they change no bit of the results.
        inputs: the graph inputs in creation order (derived).
        dead_after: per node index, the values no later node needs (derived).

    Setting an attribute raises ``FrozenInstanceError``; :meth:`replace` gives a copy.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((2,), name="x")
        >>> prog = af.compile(x * 3.0)
        >>> prog(np.array([1.0, 2.0]))
        array([3., 6.], dtype=float32)
        >>> prog({"x": np.array([1.0, 2.0])})
        array([3., 6.], dtype=float32)
    """

    outputs: tuple
    nodes: tuple
    opt: object = 0
    target: object = None
    output_names: tuple | None = None
    report: PassReport = NO_PASSES
    placements: tuple = ()
    inputs: tuple = field(init=False, repr=False)
    dead_after: tuple = field(init=False, repr=False)

    def __post_init__(self):
        outputs = tuple(self.outputs)
        nodes = tuple(self.nodes)
        names = self.output_names
        names = tuple(t.name for t in outputs) if names is None else tuple(names)
        if not isinstance(self.report, PassReport):
            raise OptionError(
                f"Program: report must be a PassReport, got {type(self.report).__name__}"
            )
        if self.placements:
            object.__setattr__(self, "placements", _checked_placements(self, self.placements))
        inputs = sorted((n for n in nodes if n.op == "input"), key=lambda t: t._order)
        for key, value in (
            ("outputs", outputs),
            ("nodes", nodes),
            ("output_names", names),
            ("inputs", tuple(inputs)),
            ("dead_after", _dead_after(nodes, outputs)),
        ):
            object.__setattr__(self, key, value)

    @classmethod
    def from_outputs(
        cls, outputs, opt=0, target=None, output_names=None, report=NO_PASSES
    ) -> Program:
        """A Program of ``outputs`` exactly as built: no passes, no checks, no warnings.

        This is how every layer below :func:`aneforge.compile` makes a Program.

        Example:
            >>> import aneforge as af
            >>> x = af.input((2,), name="x")
            >>> Program.from_outputs([x.relu()]).op_count
            1
        """
        outs = tuple(outputs)
        return cls(outs, topological_order(outs), opt, target, output_names, report)

    @classmethod
    def coerce(cls, out, caller: str = "compile") -> Program:
        """``out`` itself if it is a Program, else :meth:`from_outputs` of ``out`` (a
        Tensor or a non-empty list of Tensors; anything else raises
        :class:`~aneforge.errors.OptionError` naming ``caller``).

        Example:
            >>> import aneforge as af
            >>> prog = Program.coerce(af.input((2,)).exp())
            >>> Program.coerce(prog) is prog
            True
        """
        if isinstance(out, Program):
            return out
        return cls.from_outputs(as_outputs(out, caller))

    def replace(self, **changes) -> Program:
        """A copy with some of ``opt``, ``target``, ``output_names`` and ``report``
        changed; it shares the graph and the views derived from it (a program of other
        nodes is :meth:`from_outputs` of them).

        Example:
            >>> import aneforge as af
            >>> prog = Program.from_outputs([af.input((2,)).exp()])
            >>> tuned = prog.replace(opt=2)
            >>> (prog.opt, tuned.opt), tuned.nodes is prog.nodes
            ((0, 2), True)
        """
        allowed = ("opt", "target", "output_names", "report")
        unknown = sorted(set(changes) - set(allowed))
        if unknown:
            raise OptionError(
                f"Program.replace: cannot change {', '.join(unknown)}; it changes "
                f"{', '.join(allowed)} (a program of other nodes is Program.from_outputs)"
            )
        if "report" in changes and not isinstance(changes["report"], PassReport):
            raise OptionError(
                "Program.replace: report must be a PassReport, got "
                f"{type(changes['report']).__name__}"
            )
        if changes.get("output_names") is not None:
            names = tuple(changes["output_names"])
            if len(names) != len(self.outputs):
                raise OptionError(
                    f"Program.replace: {len(names)} output name(s) for "
                    f"{len(self.outputs)} output(s)"
                )
            changes["output_names"] = names
        elif "output_names" in changes:
            changes["output_names"] = tuple(t.name for t in self.outputs)
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)  # the fields and the cached views
        new.__dict__.update(changes)
        return new

    def with_placements(self, placements) -> Program:
        """A copy whose fused regions run with ``placements`` (a mapping or pairs of
        region index -> one ``'inline'`` / ``'materialize'`` per intermediate of the
        region, in region order), replacing any it had; ``{}`` restores the defaults.
        Raises :class:`~aneforge.errors.OptionError` naming a region that is not a fused
        one, a vector of the wrong length or a value that is no placement.

        Example:
            >>> import aneforge as af
            >>> x = af.input((4,), name="x")
            >>> prog = Program.from_outputs([(x.exp() + 1.0).tanh()])
            >>> prog.with_placements({0: ["inline", "materialize"]}).placement(0)
            ('inline', 'materialize')
            >>> prog.placement(0) is None
            True
        """
        new = self.replace()
        checked = _checked_placements(self, placements)
        new.__dict__["placements"] = checked
        return new

    def placement(self, index: int) -> tuple[str, ...] | None:
        """The placement vector fused region ``index`` runs with, or None (the
        default)."""
        return dict(self.placements).get(index)

    # ---- the pass report ---------------------------------------------------------------
    @property
    def passes(self) -> Mapping:
        """What the passes recorded, by key (``'routes'``, ``'variant'``,
        ``'compression'``, ``'preflight'``, ``'divergence'``, ``'precision'``...),
        read-only: :attr:`PassReport.entries` of :attr:`report`."""
        return self.report.entries

    @property
    def tune_report(self) -> Mapping | None:
        """The tuner's report of a tuned program (``af.tune``, ``compile(opt=2)``),
        else None: :attr:`PassReport.tune` of :attr:`report`."""
        return self.report.tune

    # ---- segmentation ------------------------------------------------------------------
    @cached_property
    def regions(self):
        """Fused regions and bridge cuts in execution order (see ``compiler.segment``;
        computed once)."""
        return segment(self.nodes)

    @property
    def cuts(self) -> list[Tensor]:
        """One bridge node per native call: each call cuts the graph (topk's values and
        indices are one call)."""
        return [r.nodes[0] for r in self.regions if r.kind == "bridge"]

    @property
    def fused_regions(self):
        """Only the fused regions, in execution order."""
        return [r for r in self.regions if r.kind == "fused"]

    # ---- inspection --------------------------------------------------------------------
    @cached_property
    def layer_names(self) -> dict[int, str]:
        """``{id(node): layer name}`` for every node, in execution order (one pass, cached).

        The name a node was given, else ``{op}_{k}`` (``k`` counts that op in execution
        order); duplicates get ``_1``, ``_2``... (:func:`aneforge.graph.naming.layer_names`).
        """
        return layer_names(self.nodes)

    def layer_name(self, node: Tensor) -> str:
        """The layer name of ``node``, one of :attr:`nodes`.

        Example:
            >>> import aneforge as af
            >>> x = af.input((2,), name="x")
            >>> prog = af.compile(x.relu())
            >>> prog.layer_name(prog.outputs[0]), prog.layer_name(x)
            ('relu_0', 'x')
        """
        try:
            return self.layer_names[id(node)]
        except KeyError:
            raise OptionError(
                f"Program.layer_name: {node!r} is not a node of this program (compile may "
                "have replaced it); pass one of prog.nodes"
            ) from None

    @property
    def compute_nodes(self) -> list[Tensor]:
        """The nodes that compute (inputs and weights left out)."""
        return [n for n in self.nodes if get_op(n.op).kind != "source"]

    @property
    def op_count(self) -> int:
        """Number of computing nodes."""
        return len(self.compute_nodes)

    @property
    def flops(self) -> int:
        """Total FLOPs of the contractions (the only ops with a closed-form count)."""
        total = 0
        for n in self.compute_nodes:
            op = get_op(n.op)
            total += int(op.flops([s.shape for s in n.srcs], n.shape, n.attrs))
        return total

    @property
    def weight_bytes(self) -> int:
        """Bytes the program's weights stream (compressed encodings counted as such)."""
        return sum(weight_stream_bytes_exact(n) for n in self.nodes if n.op == "weight")

    def summary(self) -> str:
        """A readable description: inputs, outputs, op histogram and the node list."""
        counts = Counter(n.op for n in self.compute_nodes)
        where = "" if self.target is None else f", target={_target_label(self.target)}"
        lines = [
            f"Program: {self.op_count} ops, {len(self.inputs)} input(s), "
            f"{len(self.outputs)} output(s), opt={self.opt!r}{where}",
            f"  weights: {self.weight_bytes / 1024:.1f} KiB, "
            f"contractions: {self.flops / 1e6:.2f} MFLOP",
        ]
        for t in self.inputs:
            lines.append(f"  input  {t.name or '?'}: {t.shape}")
        for i, (t, name) in enumerate(zip(self.outputs, self.output_names)):
            label = f" '{name}'" if name else ""
            lines.append(f"  output {i}{label}: {t.shape} ({t.op})")
        lines.append("  ops: " + ", ".join(f"{op} x{c}" for op, c in sorted(counts.items())))
        lines.append(
            f"  regions: {len(self.fused_regions)} fused, {len(self.cuts)} cut(s) (bridge ops)"
        )
        index = {id(n): i for i, n in enumerate(self.nodes)}
        placed = dict(self.placements)
        for region in self.regions:
            label = "fused region" if region.kind == "fused" else "bridge (cut)"
            if region.index in placed:
                vector = placed[region.index]
                label += f", placement: {vector.count('inline')} of {len(vector)} inlined"
            lines.append(f"  [{region.index}] {label}")
            for n in region.nodes:
                args = ", ".join(f"%{index[id(s)]}" for s in n.srcs)
                label = f"  '{user_name(n)}'" if user_name(n) else ""
                lines.append(f"    %{index[id(n)]} = {n.op}({args}) -> {n.shape}{label}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        where = "" if self.target is None else f", target={_target_label(self.target)}"
        return f"<Program {self.op_count} ops, opt={self.opt!r}{where}>"

    # ---- export ------------------------------------------------------------------------
    def export_coreml(self, path, target=None, **options):
        """Write this program as an fp16 Core ML ``.mlpackage`` (needs coremltools).

        ``target`` (an architecture or chip name) picks the minimum deployment target;
        see :func:`aneforge.io.coreml_export.export_coreml` for ``options``. Returns the
        package path.
        """
        return EXPORTERS["coreml"](self, path, target=target, **options)

    # ---- running -----------------------------------------------------------------------
    def prepare_inputs(self, args, kwargs) -> list[np.ndarray]:
        """Match ``args``/``kwargs`` to the inputs, check shapes, cast to fp16.

        One dict as the only argument gives the inputs by name, like keywords:
        ``prog({"x": a})`` is ``prog(x=a)``.

        Example:
            >>> import numpy as np, aneforge as af
            >>> x, y = af.input((2,), name="x"), af.input((2,), name="y")
            >>> prog = af.compile(x - y)
            >>> [a.tolist() for a in prog.prepare_inputs(({"y": [1, 1], "x": [3, 4]},), {})]
            [[3.0, 4.0], [1.0, 1.0]]
        """
        if len(args) == 1 and isinstance(args[0], Mapping):
            args, kwargs = (), self._by_name(args[0], kwargs)
        if len(args) > len(self.inputs):
            raise InputError(
                f"program takes {len(self.inputs)} input(s) "
                f"({', '.join(_label(t) for t in self.inputs)}), got {len(args)}"
            )
        given: dict[int, object] = dict(enumerate(args))
        names = {t.name: i for i, t in enumerate(self.inputs) if t.name}
        for key, value in kwargs.items():
            if key not in names:
                raise InputError(
                    f"program has no input named '{key}'; its inputs are "
                    f"{', '.join(_label(t) for t in self.inputs)}"
                )
            if names[key] in given:
                raise InputError(f"input '{key}' given both by position and by name")
            given[names[key]] = value
        missing = [_label(t) for i, t in enumerate(self.inputs) if i not in given]
        if missing:
            raise InputError(f"missing input(s): {', '.join(missing)}")
        return [_to_fp16(given[i], t) for i, t in enumerate(self.inputs)]

    def _by_name(self, given: Mapping, kwargs) -> dict:
        """The keyword inputs of a dict of inputs by name (plus any keywords)."""
        names = [t.name for t in self.inputs if t.name]
        bad = [k for k in given if not isinstance(k, str) or k not in names]
        if bad:
            known = ", ".join(f"'{n}'" for n in names) or "none (its inputs have no names)"
            raise InputError(
                f"program inputs given as a dict name {', '.join(map(repr, bad))}, which "
                f"no input has; its named inputs are {known}: pass {{name: array}} with "
                "those names, or the arrays in input order"
            )
        both = sorted(set(given) & set(kwargs))
        if both:
            raise InputError(f"input(s) {', '.join(both)} given both in the dict and by name")
        return {**given, **kwargs}

    def run(self, *args, device=None, **kwargs):
        """Run on ``device`` (name or Device; default the emulator); fp16 arrays out."""
        return self._execute(args, kwargs, device)

    def __call__(self, *args, device=None, **kwargs):
        outs = [np.asarray(o, dtype=np.float32) for o in self._execute(args, kwargs, device)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def trace(self, *args, fast: bool = True, target=None, **kwargs):
        """Run on the fp16 emulator keeping every node's value range: a
        :class:`~aneforge.emulator.trace.Trace` whose ``first_nonfinite()`` names the
        first node that overflowed (or produced a nan) and what fed it.

        Inputs are taken as by ``prog(...)``. ``target`` picks the per-chip numerics
        (default: the program's own target); ``fast=False`` uses the reference
        interpreter (the same bits).

        Example:
            >>> import numpy as np, aneforge as af
            >>> x = af.input((3,), name="x")
            >>> tr = af.compile(x.exp(name="e")).trace(np.array([1.0, 20.0, 2.0]))
            >>> tr.first_nonfinite().name, tr["e"].n_inf
            ('e', 1)
        """
        inputs = self.prepare_inputs(args, kwargs)
        return trace(self, inputs, fast=fast, target=self.target if target is None else target)

    def _execute(self, args, kwargs, device):
        inputs = self.prepare_inputs(args, kwargs)
        return get_device(device).run(self, inputs)


#: The values of a placement vector (those of :class:`aneforge.kernel.lower.Placement`).
PLACEMENT_CHOICES = ("materialize", "inline")


def _intermediates(program: Program, region) -> int:
    """How many intermediates fused ``region`` has: nodes neither program outputs nor
    read outside it (:func:`aneforge.kernel.lower.region_nodes` lists them)."""
    inside = {id(n) for n in region.nodes}
    seen = {id(t) for t in program.outputs}
    for node in program.nodes:
        if id(node) not in inside:
            seen.update(id(s) for s in node.srcs if id(s) in inside)
    return sum(id(n) not in seen for n in region.nodes)


def _checked_placements(program: Program, placements) -> tuple:
    """``placements`` (a mapping or pairs) as the sorted tuple of :attr:`Program.
    placements`, every entry checked against ``program``'s fused regions."""
    pairs = placements.items() if isinstance(placements, Mapping) else placements
    fused = {r.index: r for r in program.fused_regions}
    out: dict[int, tuple[str, ...]] = {}
    for pair in pairs:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise OptionError(
                f"placements: {pair!r:.60} is not a (region index, vector) pair; give "
                "{region index: ['inline' | 'materialize', ...]}"
            )
        index, vector = pair
        if isinstance(index, bool) or not isinstance(index, int) or index not in fused:
            raise OptionError(
                f"placements: region {index!r:.40} is not a fused region of this program; "
                f"its fused regions are {sorted(fused)}"
            )
        if index in out:
            raise OptionError(f"placements: region {index} is given twice")
        if isinstance(vector, str) or not isinstance(vector, (tuple, list)):
            raise OptionError(
                f"placements: region {index}'s placement {vector!r:.60} is not a list of "
                "'inline' / 'materialize'"
            )
        bad = [p for p in vector if not (isinstance(p, str) and str(p) in PLACEMENT_CHOICES)]
        if bad:
            raise OptionError(
                f"placements: region {index}: {bad[0]!r:.40} is not one of 'materialize', 'inline'"
            )
        want = _intermediates(program, fused[index])
        if len(vector) != want:
            raise OptionError(
                f"placements: region {index} has {want} intermediate(s), the placement "
                f"gives {len(vector)}; give one 'inline' / 'materialize' per intermediate"
            )
        out[index] = tuple(str(p) for p in vector)
    return tuple(sorted(out.items()))


def _target_label(target) -> str:
    arch = getattr(target, "arch", None)
    return f"{arch} (family {target.family})" if arch else str(target)


def _label(t: Tensor) -> str:
    return f"'{t.name}' {t.shape}" if t.name else f"{t.shape}"


def _to_fp16(value, t: Tensor) -> np.ndarray:
    if isinstance(value, Mapping):
        raise InputError(
            f"input {_label(t)}: got a dict; a dict of inputs by name must be the only "
            "argument (prog({'x': a})), or pass arrays by position or keyword"
        )
    if t.dtype != "float16":  # ids and masks stay whole numbers of the input's type
        return integer_feed(value, t)
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiub":
        raise DTypeError(f"input {_label(t)}: dtype {arr.dtype} cannot be cast to fp16")
    if arr.shape != t.shape:
        raise InputError(f"input {_label(t)}: expected shape {t.shape}, given {arr.shape}")
    fast = to_fp16(arr)  # the same bits in one compiled pass, where every value is finite
    if fast is not None:
        return fast
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(np.float16)
    if arr.dtype.kind in "fiu" and (np.isinf(out) & np.isfinite(arr)).any():
        worst = float(np.max(np.abs(arr[np.isinf(out) & np.isfinite(arr)])))
        warnings.warn(
            f"input {_label(t)}: value {worst:g} is beyond fp16 (65504) and becomes inf "
            "on the engine; scale the input down",
            PrecisionWarning,
            stacklevel=5,  # user -> __call__/run -> _execute -> prepare_inputs
        )
    return out


def _dead_after(nodes, outputs) -> tuple[tuple[Tensor, ...], ...]:
    """For each node index, the values no later node needs (freed after it runs)."""
    keep = {id(t) for t in outputs}
    last: dict[int, int] = {}
    for i, n in enumerate(nodes):
        for s in n.srcs:
            last[id(s)] = i
    dead: list[list[Tensor]] = [[] for _ in nodes]
    for n in nodes:
        if id(n) in last and id(n) not in keep:
            dead[last[id(n)]].append(n)
    return tuple(tuple(d) for d in dead)
