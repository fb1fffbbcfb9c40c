"""Published silicon timings as graphs to estimate.

Two bundled files: ``data/silicon_calibration.csv`` (a copy of the spec's reference
timings: M1, M2 Pro, M5 Pro) and ``data/silicon_published.csv`` (further published
timings on other chips, collected from public benchmark results with the source of every
row; repeated runs of one shape by one method are merged into their median).

A third, ``data/silicon_models.csv``, holds published **whole-model** latencies (ResNets,
MobileNet, ViTs, BERT-style encoders on named chips): :func:`load_model_rows` reads it.
Rows published by ANEForge (the project whose per-op corpus calibrates the default
model) have ``role`` 'fit'; every other row is 'validation' and is never fitted on. A
row with an ``excluded`` reason (its timing includes host work, or it uses a feature
aneforge does not price) is shown but neither fitted on nor scored.

Each kernel row is a GEMM ``x[M,K] @ W[K,N]`` or a chain of ``layers`` "same"-padded stride-1
convolutions, with the chip (marketing name) and the measured latency. This module
builds each workload with the graph API and scores a model on them by the
geometric-mean error factor ``exp(mean |ln(pred / meas)|)`` and the worst factor.

Example:
    >>> from aneforge.cost.silicon import load_rows
    >>> len(load_rows()) >= 18
    True
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from ..data import text as bundled_text
from ..graph import api
from ..graph.frozen import frozen_zeros
from ..graph.tensor import input as graph_input
from ..graph.tensor import weight
from ..targets.names import resolve_target


def chip_arch(chip: str) -> str:
    """The architecture a row's chip is modelled as (``aneforge.targets.names``)."""

    return resolve_target(chip).arch


@dataclass(frozen=True)
class SiliconRow:
    """One published timing."""

    chip: str
    workload: str
    dims: dict
    latency_us: float
    source: str

    @property
    def label(self) -> str:
        d = self.dims
        if self.workload == "gemm":
            return f"{self.chip} gemm {d['M']}x{d['K']}x{d['N']}"
        return (
            f"{self.chip} conv {d['C_in']}->{d['C_out']} {d['H']}x{d['W']} "
            f"k{d['kernel']} x{d['layers']}"
        )


CALIBRATION = "silicon_calibration.csv"
PUBLISHED = "silicon_published.csv"


def load_rows(text: str | None = None, bundled: str = CALIBRATION) -> list[SiliconRow]:
    """Parse ``text`` (CSV in the calibration format) or, without it, the bundled file
    ``bundled`` (:data:`CALIBRATION` or :data:`PUBLISHED`)."""
    if text is None:
        text = bundled_text(bundled)
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        dims = {
            k: int(r[k])
            for k in ("M", "K", "N", "C_in", "C_out", "H", "W", "kernel", "layers")
            if r.get(k, "").strip()
        }
        rows.append(
            SiliconRow(r["chip"], r["workload"], dims, float(r["latency_ms"]) * 1e3, r["source"])
        )
    return rows


MODELS = "silicon_models.csv"
ROLES = ("fit", "validation")


@dataclass(frozen=True)
class ModelRow:
    """One published whole-model latency (``data/silicon_models.csv``)."""

    chip: str
    model: str  # an ``aneforge.models.zoo`` name
    batch: int
    size: int  # image side (vision) or sequence length (text)
    precision: str
    latency_us: float
    statistic: str  # min, median, mean or unknown
    origin: str  # who published it (ANEForge rows are the only fit rows)
    role: str  # "fit" or "validation"
    source: str
    note: str = ""
    excluded: str = ""  # why no estimate is scored against it ("" when scored)

    @property
    def label(self) -> str:
        unit = "seq" if self.size and self.model in TEXT_MODELS else "px"
        return f"{self.chip} {self.model} b{self.batch} {self.size}{unit}"


TEXT_MODELS = ("bert_base", "distilbert", "minilm_l6")


def _size(text: str) -> int:
    """``224x224`` -> 224, ``seq=128`` -> 128."""
    t = text.strip().lower()
    if t.startswith("seq="):
        return int(t[4:])
    side = t.split("x")[0]
    return int(side)


def load_model_rows(text: str | None = None) -> list[ModelRow]:
    """Parse ``text`` (CSV in the ``silicon_models.csv`` format) or the bundled file.

    Example:
        >>> rows = load_model_rows()
        >>> {r.role for r in rows} <= {"fit", "validation"}
        True
    """
    if text is None:
        text = bundled_text(MODELS)
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        role = r["role"].strip()
        if role not in ROLES:
            raise ValueError(f"silicon_models.csv: role {role!r} is not one of {ROLES}")
        if role == "fit" and r["origin"].strip() != "ANEForge":
            raise ValueError(f"silicon_models.csv: a fit row must be ANEForge's: {r}")
        rows.append(
            ModelRow(
                r["chip"].strip(),
                r["model"].strip(),
                int(r["batch"]),
                _size(r["input"]),
                r["precision"].strip(),
                float(r["latency_ms"]) * 1e3,
                r["statistic"].strip(),
                r["origin"].strip(),
                role,
                r["source"].strip(),
                r.get("note", "").strip(),
                r.get("excluded", "").strip(),
            )
        )
    return rows


def build_workload(row: SiliconRow):
    """The row's workload as an aneforge graph (weights are zeros: only shapes matter)."""

    d = row.dims
    if row.workload == "gemm":
        x = graph_input((d["M"], d["K"]), name="x")
        return x @ weight(frozen_zeros((d["K"], d["N"])))
    if row.workload == "conv":
        x = graph_input((1, d["C_in"], d["H"], d["W"]), name="x")
        y, cin, k = x, d["C_in"], d["kernel"]
        for _ in range(d.get("layers", 1)):
            w = weight(frozen_zeros((d["C_out"], cin, k, k)))
            y = api.conv(y, w, padding=k // 2)
            cin = d["C_out"]
        return y
    raise ValueError(f"unknown workload '{row.workload}'")


def error_factors(pairs) -> tuple[float, float]:
    """(geometric-mean error factor, worst factor) of (predicted, measured) pairs."""
    logs = [abs(math.log(p / m)) for p, m in pairs]
    return math.exp(sum(logs) / len(logs)), math.exp(max(logs))
