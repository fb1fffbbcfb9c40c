"""Plots of an estimate's layers: a roofline and the slowest layers, one row per chip.

:func:`plot_estimates` draws, for each :class:`~aneforge.cost.Estimate`, a row of two
panels, and :func:`plot_reports` the same for ``aneforge check`` reports (a
:class:`~aneforge.report.CheckReport` or its JSON form), one row per model and target:

- left, the **roofline**: x is a layer's arithmetic intensity (FLOPs per byte moved:
  weights, inputs and output), y the FLOP rate it attains (TFLOP/s), both logarithmic;
  the chip's ceilings (:func:`aneforge.cost.estimate.roofs`) are the convolution and
  matmul compute peaks (horizontal) and the weight-DMA and activation-DMA bandwidths
  (sloped). One dot per layer that carries FLOPs, coloured by what bounds it. A dot is
  the layer **alone**: its FLOPs over its own time ``overhead + max(compute, weights +
  activations)``, so it lies under the roofs; inside a region the engine overlaps one
  layer's DMA with another's compute, which is why a layer's part of the total
  (``time_us``, the bars) can be shorter than its dot implies. Norms, pools and other
  ops without FLOPs have no dot (they are priced by their traffic and pass cost).
- right, **the slowest layers**: horizontal bars of their ``time_us`` (their part of
  the total), labelled by layer name, with the total and the dispatch floor (which no
  layer owns) in the title.

The figures are estimates of the analytic model, biased as docs/cost_model.md says.
matplotlib (the ``plot`` extra: ``pip install 'aneforge[plot]'``) is imported only
when a plot is drawn; the figure is rendered off-screen (Agg; no display, no change to
pyplot's state or backend). Same inputs, same image.

Example:
    >>> import tempfile, pathlib, aneforge as af
    >>> from aneforge.plot import plot_estimates
    >>> x, y = af.nn.small_cnn()
    >>> est = af.estimate_breakdown(af.compile(y, target="M1"), target="M1")
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "cnn.png"
    >>> plot_estimates([est], path, names=["M1"]).name
    'cnn.png'
    >>> path.read_bytes()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
    True
"""

from __future__ import annotations

import math
import numbers
import textwrap
from pathlib import Path

from .cost.estimate import Estimate, roofs
from .errors import OptionError

#: Bar and dot colour per bound of a fused layer (bridge layers are grey crosses).
BOUND_COLOURS = {
    "compute": "#1f77b4",
    "weights": "#ff7f0e",
    "activations": "#2ca02c",
    "overhead": "#d62728",
}
BRIDGE_COLOUR = "#7f7f7f"
#: Layer names longer than this are shortened in the middle ("…").
NAME_CHARS = 30
_ROW_WIDTH_IN = 16.0
_DOT_AREA = 28  # points^2 of one layer's dot
_SPOT = 0.06  # decades: layers closer than this on both axes share a dot
_BAR_HEIGHT_IN = 0.26
_MIN_BAR_SLOTS = 8  # fewer bars keep their thickness (empty slots below)
_NOTE_HEIGHT_IN = 1.1
_FONT = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9}


def _matplotlib():
    """matplotlib's Figure class, or an OptionError telling how to install it."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise OptionError(
            f"plotting needs matplotlib ({err}); install it with: pip install 'aneforge[plot]'"
        ) from None
    return Figure


def check_plot_path(path) -> Path:
    """``path`` as a Path, after checking matplotlib is installed, the folder exists and
    the suffix names an image format matplotlib writes (OptionError otherwise).

    Example:
        >>> check_plot_path("out.png").suffix
        '.png'
    """
    Figure = _matplotlib()
    path = Path(path)
    formats = Figure().canvas.get_supported_filetypes()
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats:
        raise OptionError(
            f"plot file {str(path)!r}: unknown image format {path.suffix or '(none)'!r}; end "
            f"the name with one of {', '.join('.' + f for f in sorted(formats))} (e.g. .png)"
        )
    if not path.parent.is_dir():
        raise OptionError(
            f"plot file {str(path)!r}: folder {str(path.parent)!r} does not exist; create it "
            "or write the plot elsewhere"
        )
    return path


def _check_top(top) -> int:
    if isinstance(top, bool) or not isinstance(top, numbers.Integral) or top < 1:
        raise OptionError(f"top must be a whole number of layers >= 1, got {top!r}")
    return int(top)


def _chip_label(name, arch) -> str:
    """'M1 (h13)'; an architecture alone when the name is one ('h13')."""
    if arch is None:
        return "default model (pruning heuristic)"
    return str(arch) if str(name) == str(arch) else f"{name} ({arch})"


def _row(title, roof, total_us, floor_us, layers, note=None) -> dict:
    """A plot row; ``roof`` names what :func:`~aneforge.cost.estimate.roofs` draws: the
    chip (with its memory ceiling) where one was named, else the architecture."""
    return {"title": title, "roof": roof, "total_us": total_us, "floor_us": floor_us,
            "layers": list(layers), "note": note}  # fmt: skip


def estimate_rows(estimates, names=None) -> list[dict]:
    """The plot rows of :class:`~aneforge.cost.Estimate` objects (``names``: one label
    per estimate, e.g. the chip names given; default: the architecture)."""
    estimates = list(estimates)
    for est in estimates:
        if not isinstance(est, Estimate):
            raise OptionError(
                f"plot_estimates takes Estimates (af.estimate_breakdown(prog, target=T)), "
                f"got {type(est).__name__}"
            )
    names = list(names) if names is not None else [e.target for e in estimates]
    if len(names) != len(estimates):
        raise OptionError(f"names: {len(names)} names for {len(estimates)} estimates")
    rows = []
    for est, name in zip(estimates, names):
        label = _chip_label(name, est.target)
        roof = est.chip or est.target
        rows.append(_row(label, roof, est.total_us, est.floor_us, est.to_records()))
    return rows


def report_rows(reports) -> list[dict]:
    """The plot rows of check reports (dicts as :func:`aneforge.report.check_report`
    returns or ``aneforge check --json`` prints): per report its targets, or its
    default-chip estimate when it has none; a target that does not compile gets a row
    saying so."""
    rows = []
    for rep in reports:
        for est in rep["targets"] or [rep["estimate"]]:
            title = f"{rep['model']} on {_chip_label(est['target'], est['arch'])}"
            if not est["compiles"]:
                why = "; ".join(est["preflight"]) or "a blocking preflight finding"
                rows.append(_row(title, est["arch"], None, None, [], f"does not compile: {why}"))
                continue
            floor = est["parts_us"]["floor"]
            rows.append(_row(title, est["target"], est["estimate_us"], floor, est["layers"]))
    return rows


def plot_estimates(estimates, path, top: int = 20, names=None) -> Path:
    """Write the roofline and slowest-layer panels of each estimate to ``path``.

    Args:
        estimates: :class:`~aneforge.cost.Estimate` objects
            (``af.estimate_breakdown(prog, target=T)``), one figure row each.
        path: the image to write; its suffix picks the format (.png, .svg, .pdf, ...).
        top: how many of the slowest layers the bar panel shows.
        names: a label per estimate (e.g. ``"M1"``, shown as ``M1 (h13)``).

    Returns:
        ``path`` as a :class:`~pathlib.Path`. Raises OptionError without matplotlib,
        for an unknown suffix, a missing folder or a ``top`` below 1.
    """
    return plot_rows(estimate_rows(estimates, names), path, top)


def plot_reports(reports, path, top: int = 20) -> Path:
    """:func:`plot_estimates` for check reports: one row per model and target."""
    return plot_rows(report_rows(reports), path, top)


def plot_rows(rows: list[dict], path, top: int = 20) -> Path:
    """Draw plot rows (:func:`estimate_rows`, :func:`report_rows`) into ``path``."""
    top = _check_top(top)
    path = check_plot_path(path)
    if not rows:
        raise OptionError("plot: no estimate to plot (give at least one)")
    Figure = _matplotlib()
    from matplotlib import rc_context

    bars = max(min(top, max((len(r["layers"]) for r in rows), default=1)), _MIN_BAR_SLOTS)
    row_h = max(6.0, _BAR_HEIGHT_IN * bars + 2.4)
    heights = [row_h if row["note"] is None else _NOTE_HEIGHT_IN for row in rows]
    with rc_context(_FONT):
        fig = Figure(figsize=(_ROW_WIDTH_IN, sum(heights)), layout="constrained")
        grid = fig.add_gridspec(len(rows), 2, width_ratios=[1.1, 1], height_ratios=heights)
        for i, row in enumerate(rows):
            if row["note"] is not None:  # one line across the row: nothing to draw
                _note(fig.add_subplot(grid[i, :]), row["title"], row["note"])
                continue
            _roofline(fig.add_subplot(grid[i, 0]), row)
            _slowest(fig.add_subplot(grid[i, 1]), row, top)
        fig.savefig(path, dpi=110)
    return path


def _note(ax, title: str, text: str) -> None:
    ax.set_axis_off()
    ax.set_title(title, loc="left")
    ax.text(0.0, 0.5, _wrap(text, 160), transform=ax.transAxes, va="center")


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def roofline_points(layers) -> list[tuple[float, float, dict]]:
    """``(FLOP per byte, attained TFLOP/s, layer)`` of each layer record
    (:meth:`aneforge.cost.NodeCost.to_record`) that carries FLOPs and moves bytes: the
    layer alone (its pass plus the larger of its compute and DMA legs; a bridge op's
    own time), so no point lies above the chip's roofs.

    Example:
        >>> rec = {"kind": "fused", "flops": 2e6, "bytes": 1e4, "time_us": 1.0,
        ...        "compute_us": 2.0, "weights_us": 0.5, "activations_us": 0.1,
        ...        "overhead_us": 0.0}
        >>> roofline_points([rec])[0][:2]
        (200.0, 1.0)
    """
    points = []
    for layer in layers:
        t = _alone_us(layer)
        if layer["flops"] > 0 and layer["bytes"] > 0 and t > 0:
            points.append((layer["flops"] / layer["bytes"], layer["flops"] / t / 1e6, layer))
    return points


def _alone_us(layer: dict) -> float:
    """The layer's own time: its pass plus the larger of compute and DMA (fused), or
    its ``time_us`` (bridge)."""
    if layer["kind"] == "fused":
        memory = layer["weights_us"] + layer["activations_us"]
        alone = layer["overhead_us"] + max(layer["compute_us"], memory)
        if alone > 0:
            return alone
    return layer["time_us"]


def _roofline(ax, row: dict) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    r = roofs(row["roof"])
    peak = r["peak_flops_per_us"] / 1e6  # flops per us / 1e6 = TFLOP/s
    dots = roofline_points(row["layers"])
    ridges = [r["peak_flops_per_us"] / r[k] for k in ("weight_bytes_per_us",
                                                        "activation_bytes_per_us")]  # fmt: skip
    xs = [d[0] for d in dots] + ridges
    lo, hi = min(xs) / 4, max(xs) * 4
    if hi < 100 * lo:  # at least two decades, so that major ticks show
        lo, hi = math.sqrt(lo * hi) / 10, math.sqrt(lo * hi) * 10
    ax.set_xscale("log")
    ax.set_yscale("log")
    ceilings = _ceilings(ax, r, lo)
    handles = _dots(ax, dots)
    bottom = min([d[1] for d in dots] + [r["matmul_peak_flops_per_us"] / 25e6]) / 4
    ax.set_ylim(bottom, peak * 2)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of weights, inputs and output)")
    ax.set_ylabel("attained TFLOP/s (layer alone)")
    ax.set_title(
        f"{row['title']}: roofline, {len(dots)} of {len(row['layers'])} layers carry FLOPs",
        loc="left",
    )
    ax.grid(True, which="major", alpha=0.3)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    # below the axes: inside, it would hide the peaks or the dots of some model
    ax.legend(handles=ceilings + handles, loc="upper center", bbox_to_anchor=(0.5, -0.13),
              ncol=3, title="ceilings; layers by bound (a dot ×n: n layers alike)")  # fmt: skip
    if not handles:
        ax.text(0.5, 0.5, "no layer carries FLOPs", transform=ax.transAxes, ha="center")


def _ceilings(ax, r: dict, lo: float) -> list:
    """Draw the compute peaks (horizontal) and the DMA roofs (sloped, from ``lo`` up to
    their ridge with the convolution peak); returns their legend handles."""
    peak, matmul = r["peak_flops_per_us"] / 1e6, r["matmul_peak_flops_per_us"] / 1e6
    lines = [
        ax.axhline(peak, color="black", lw=1.6, label=f"conv peak {peak:.1f} TFLOP/s"),
        ax.axhline(matmul, color="black", lw=1.2, ls="--",
                   label=f"matmul peak {matmul:.1f} TFLOP/s"),
    ]  # fmt: skip
    for label, key, style in (("weight DMA", "weight_bytes_per_us", "-"),
                              ("activation DMA", "activation_bytes_per_us", "-.")):  # fmt: skip
        bw = r[key]  # bytes per us; / 1e3 = GB/s
        ridge = r["peak_flops_per_us"] / bw
        (line,) = ax.plot([lo, ridge], [lo * bw / 1e6, peak], color="dimgray", lw=1.4,
                          ls=style, label=f"{label} {bw / 1e3:.0f} GB/s")  # fmt: skip
        lines.append(line)
    return lines


def _dots(ax, dots) -> list:
    """Draw one dot per spot of layers (:func:`_clusters`), area by how many; returns
    the legend handles, one per bound."""
    from matplotlib.lines import Line2D

    handles, labelled = [], []
    for key, points in _clusters(dots).items():
        colour = BOUND_COLOURS.get(key, BRIDGE_COLOUR)
        marker = "x" if key == "bridge" else "o"
        sizes = [min(_DOT_AREA * n, 12 * _DOT_AREA) for _, _, n in points]
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=sizes, color=colour,
                   marker=marker, alpha=0.75, zorder=3, linewidths=0.6,
                   edgecolors="white" if marker == "o" else None)  # fmt: skip
        for (x, y, n), size in zip(points, sizes):
            if n < 2:
                continue
            # beside the dot (its diameter is sqrt(size) points); left of it where a label
            # already stands to the right of a dot close by
            near = any(abs(math.log10(x / lx)) < 0.2 and abs(math.log10(y / ly)) < 0.12
                       for lx, ly in labelled)  # fmt: skip
            gap = math.sqrt(size) / 2 + 2
            ax.annotate(f"×{n}", (x, y), xytext=(-gap if near else gap, -3),
                        textcoords="offset points", ha="right" if near else "left",
                        fontsize=8, color="#333333", zorder=4)  # fmt: skip
            if not near:
                labelled.append((x, y))
        count = sum(n for _, _, n in points)
        label = f"bridge op ({count})" if key == "bridge" else f"{key}-bound ({count})"
        handles.append(Line2D([], [], marker=marker, ls="", color=colour, markersize=7,
                              label=label))  # fmt: skip
    return handles


def _clusters(dots) -> dict[str, list[tuple[float, float, int]]]:
    """Dots per bound, with layers that land on one spot merged (the same bound and
    within a bin of :data:`_SPOT` decades on both log axes, drawn at their geometric
    mean): ``bound -> [(x, y, how many)]``, bounds in :data:`BOUND_COLOURS` order."""
    spots: dict[tuple, list] = {}
    for x, y, layer in dots:
        key = layer["bound"] if layer["kind"] == "fused" else "bridge"
        lx, ly = math.log10(x), math.log10(y)
        spot = spots.setdefault((key, round(lx / _SPOT), round(ly / _SPOT)), [0.0, 0.0, 0])
        spot[0], spot[1], spot[2] = spot[0] + lx, spot[1] + ly, spot[2] + 1
    order = [*BOUND_COLOURS, "bridge"]
    groups: dict[str, list] = {}
    for (key, _, _), (lx, ly, n) in spots.items():
        groups.setdefault(key, []).append((10 ** (lx / n), 10 ** (ly / n), n))
    rank = {key: order.index(key) if key in order else len(order) for key in groups}
    return dict(sorted(groups.items(), key=lambda kv: rank[kv[0]]))


def _short(name: str) -> str:
    if len(name) <= NAME_CHARS:
        return name
    head = (NAME_CHARS - 1) // 2
    return name[:head] + "…" + name[-(NAME_CHARS - 1 - head) :]


def _bar_label(layer: dict) -> str:
    name = layer["name"] or layer["op"]
    shape = "x".join(map(str, layer["shape"]))
    what = shape if name.startswith(layer["op"]) else f"{layer['op']} {shape}"
    return f"{_short(name)}  {what}"


def _slowest(ax, row: dict, top: int) -> None:
    layers = sorted(row["layers"], key=lambda r: -r["time_us"])[:top]
    total, floor = row["total_us"], row["floor_us"]
    share = floor / total if total else math.nan
    ax.set_title(
        f"{row['title']}: {total:.0f} µs in all, dispatch floor {floor:.0f} µs ({share:.0%})"
        f"\nthe {len(layers)} slowest of {len(row['layers'])} layers",
        loc="left",
    )
    if not layers:
        ax.text(0.5, 0.5, "no layers", transform=ax.transAxes, ha="center")
        return
    ys = range(len(layers))
    colours = [BOUND_COLOURS.get(r["bound"], BRIDGE_COLOUR) if r["kind"] == "fused"
               else BRIDGE_COLOUR for r in layers]  # fmt: skip
    times = [r["time_us"] for r in layers]
    ax.barh(ys, times, color=colours, height=0.7)
    ax.set_yticks(list(ys), [_bar_label(r) for r in layers], fontfamily="monospace",
                  fontsize=9)  # fmt: skip
    ax.set_ylim(max(len(layers), _MIN_BAR_SLOTS) - 0.5, -0.5)  # slowest on top
    for y, t in zip(ys, times):
        pct = f"  {t:.1f} µs, {t / total:.1%}" if total else f"  {t:.1f} µs"
        ax.text(t, y, pct, va="center", fontsize=8.5)
    ax.set_xlim(0, max(times) * 1.28 or 1)
    ax.set_xlabel("the layer's part of the total (µs); colour: its bound, as at left")
    ax.grid(True, axis="x", alpha=0.3)
