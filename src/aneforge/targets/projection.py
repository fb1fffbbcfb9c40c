"""Measurement-free peak projection and the provenance of a per-chip estimate.

The optimizer and the cost model (``docs/sources.md``) anchors the analytic per-chip
model to three measured chips, :data:`ANCHORS` (``data/anchors.json``: the constants the
spec quotes for each, with their sources; :mod:`aneforge.cost.spec_baseline` reads the
same file): h13 (M1, family 2), h14 (M2 Pro, family 3) and h17s (M5 Pro, family 5).
:func:`anchor_for` names the anchor an architecture is scaled from: its own family's
anchor when the family owns one ("silicon-anchored"), else the nearest anchor below it,
else the nearest above ("extrapolated"): family 4 (A15 tier, no spec anchor) from h14,
family 1 (no MIL path) from h13.

:func:`project_peak` projects the fp16 peak of any architecture from the one measured
absolute point, the M1's 1.8 TFLOP/s, scaled by cores x effective clock (the engine's
effective frequency at its operating clock, 0.8 x fmax) relative to the M1.

Example:
    >>> from aneforge.targets.projection import anchor_for, project_peak
    >>> round(project_peak("h17s")["tflops"], 1), anchor_for("h15")
    (8.9, ('h14', 'extrapolated'))
"""

from __future__ import annotations

from collections.abc import Mapping

from ..data import load
from .names import resolve_target
from .table import Target, get_target

_ANCHOR_FILE = load("anchors.json")  # the silicon anchors, each with its source

M1_PEAK_TFLOPS: float = _ANCHOR_FILE["reference"]["peak_tflops"]  # the M1's measured peak
REFERENCE_ARCH: str = _ANCHOR_FILE["reference"]["arch"]  # the architecture of that point

SILICON_ANCHORED = "silicon-anchored"
EXTRAPOLATED = "extrapolated"

#: The measured anchors and the constants the specification quotes for each
#: (``data/anchors.json``, read-only); None where the spec gives no figure. peak_tflops
#: is the roofline fit's peak (the M1's headline *measured* peak, 1.8 TFLOP/s, is
#: M1_PEAK_TFLOPS); ramp is the h14 mid-utilization compute ramp
#: eff_peak = peak * min(1, (flops / F) ** q).
ANCHORS: Mapping[str, Mapping] = _ANCHOR_FILE["anchors"]


def anchor_for(arch: str | Target) -> tuple[str, str]:
    """``(anchor_arch, kind)``: the anchor ``arch`` is scaled from, and whether that makes
    its estimate ``'silicon-anchored'`` (its family owns the anchor) or
    ``'extrapolated'`` (the nearest anchor below its family, else the nearest above).

    Example:
        >>> anchor_for("h17d"), anchor_for("h11")
        (('h17s', 'silicon-anchored'), ('h13', 'extrapolated'))
    """
    family = resolve_target(arch).family
    owners = {a["family"]: name for name, a in ANCHORS.items()}
    if family in owners:
        return owners[family], SILICON_ANCHORED
    below = [f for f in owners if f < family]
    nearest = max(below) if below else min(f for f in owners if f > family)
    return owners[nearest], EXTRAPOLATED


def estimate_provenance(arch: str | Target) -> dict:
    """Where a per-chip estimate for ``arch`` comes from.

    Returns ``{"arch", "family", "kind", "anchor", "reason", "measured"}``; ``kind`` is
    ``'silicon-anchored'`` or ``'extrapolated'`` and ``anchor`` the anchor architecture
    (the three silicon anchors, docs/targets.md). ``measured`` lists, for each chip with
    published timings
    that resolves to ``arch``, how far the analytic model lands from them
    (:func:`measured_accuracy`); it is empty when no published timing covers the arch.

    Example:
        >>> p = estimate_provenance("M3 Max")
        >>> p["arch"], p["kind"], p["anchor"]
        ('h15c', 'extrapolated', 'h14')
    """
    t = resolve_target(arch)
    anchor, kind = anchor_for(t)
    a = ANCHORS[anchor]
    a_fam = a["family"]
    a_tier = get_target(anchor).tier
    label = f"{anchor} ({a['chip']})"
    if t.arch == anchor:
        reason = f"{t.arch} is the measured {a['chip']} anchor itself"
    elif kind == SILICON_ANCHORED:
        reason = (
            f"family {t.family} ({t.tier} tier) owns the {label} silicon anchor; "
            f"{t.arch} is scaled from it by its own cores and effective clock"
        )
        if t.family == 5:
            reason += " (the A16 tier folds H16/H17* into the h17s point)"
    elif t.family < a_fam:
        reason = (
            f"family {t.family} has no MIL path (aneforge programs do not compile for "
            f"it) and no anchor: extrapolated from {label}, the nearest anchor above "
            f"(family {a_fam}, {a_tier} tier), by its cores and effective clock"
        )
    else:
        reason = (
            f"family {t.family} ({t.tier} tier) has no spec silicon anchor (published M3 "
            f"Pro and M3 Ultra timings do enter the fit): extrapolated from {label}, the "
            f"nearest anchor below (family {a_fam}, {a_tier} tier), by its cores and "
            f"effective clock"
        )
    if t.curve_from != t.arch:
        reason += f"; {t.arch} has no curve of its own and uses {t.curve_from}'s"
    return {
        "arch": t.arch,
        "family": t.family,
        "kind": kind,
        "anchor": anchor,
        "reason": reason,
        "measured": measured_accuracy(t.arch),
    }


def _fit_errors() -> Mapping:
    return load("analytic_model.json")["errors"]


def measured_accuracy(arch: str) -> list[dict]:
    """How the analytic model scores on the published timings of each chip that maps to
    ``arch``, from the bundled fit (``scripts/fit_analytic.py``): per chip, its rows and
    the geometric-mean and worst error factors of the fit, and of a fit that never saw
    that chip (``held_out_*``, the honest figure for a chip outside the data).

    Example:
        >>> [m["chip"] for m in measured_accuracy("h17s")]
        ['M5', 'M5 Pro']
        >>> measured_accuracy("h11")
        []
    """
    errors = _fit_errors()
    fit = errors.get("fit", {}).get("chips", {})
    held = errors.get("leave_one_chip_out", {}).get("chips", {})
    out = []
    for chip, e in sorted(fit.items()):
        if e["arch"] != arch:
            continue
        row = {"chip": chip, "rows": e["rows"], "geomean_error": e["geomean_error"]}
        row["worst_error"] = e["worst_error"]
        if chip in held:
            row["held_out_geomean_error"] = held[chip]["geomean_error"]
            row["held_out_worst_error"] = held[chip]["worst_error"]
        out.append(row)
    return out


def project_peak(arch: str | Target) -> dict:
    """The measurement-free fp16 peak of ``arch``, anchored to the M1's measured point.

    Returns ``{"tflops", "rel_m1", "cores", "ghz"}``: ``tflops = 1.8 * rel_m1`` with
    ``rel_m1 = cores * eff_clock / (cores * eff_clock)[h13]``; ``ghz`` is the effective
    clock in GHz.

    Example:
        >>> p = project_peak("h13")
        >>> p["tflops"], p["rel_m1"], p["cores"], round(p["ghz"], 4)
        (1.8, 1.0, 4, 1.1424)
    """
    t = resolve_target(arch)
    ref = get_target(REFERENCE_ARCH)
    rel = (t.cores * t.eff_clock_hz) / (ref.cores * ref.eff_clock_hz)
    return {
        "tflops": M1_PEAK_TFLOPS * rel,
        "rel_m1": rel,
        "cores": t.cores,
        "ghz": t.eff_clock_hz / 1e9,
    }
