"""aneforge: compile, estimate and emulate fp16 graphs for the Apple Neural Engine.

Build a graph with :func:`input` and the op functions, :func:`compile` it, run it in the
engine's exact fp16 arithmetic on any machine, and compare with :func:`reference`.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((4096,), name="x")
    >>> prog = af.compile([x.sum(), x @ np.ones((4096, 1))])
    >>> narrow, wide = prog(np.ones(4096))
    >>> float(narrow), float(wide[0])
    (2048.0, 4096.0)
"""

from . import graph as _graph
from . import models  # noqa: E402  (af.models.minilm, the light ONNX models)
from ._version import __version__
from .analysis import (
    DivergenceReport,
    NodeDivergence,
    RangeHazard,
    RangeReport,
    fp16_divergence,
    range_analysis,
)
from .analysis.precision import (
    NodeRisk,
    PrecisionError,
    PrecisionReport,
    check_precision,
    precision_risk,
)
from .compiler import Program
from .compiler.preflight import PreflightReport, Violation, preflight
from .compiler.program import register_exporter
from .cost import Estimate, estimate, estimate_breakdown
from .cost.simulated import SimulatedANE
from .devices import (
    Capabilities,
    Device,
    EmulatorDevice,
    devices,
    get_device,
    register_device,
)
from .driver import compile  # noqa: A004  (the public name)
from .emulator.interpreter import set_region_runner
from .errors import (
    AneforgeError,
    AneforgeWarning,
    AttributeValueError,
    BoundViolationWarning,
    ConfigFileError,
    CrossChipFP16Warning,
    DeviceUnavailable,
    DispatchFloorWarning,
    DTypeError,
    FastPathWarning,
    FileReadError,
    InputError,
    OptionError,
    PrecisionWarning,
    PreflightError,
    PreflightWarning,
    ShapeError,
    SizeLimitError,
    WeightRangeError,
)
from .graph import *  # noqa: F403
from .graph import nn
from .io import coreml_device as _coreml_device
from .io.coreml_export import export_coreml
from .io.onnx_import import (
    ConstantSaturationWarning,
    OnnxGraph,
    OnnxImportError,
    UnsupportedModelError,
    from_onnx,
)
from .io.torch_import import from_torch
from .kernel.compiled import execute_regions
from .metrics import compare
from .numerics import (
    fft,  # noqa: E402  (af.fft.fft, af.fft.rfft, ...)
    linalg,  # noqa: E402  (af.linalg.solve, af.linalg.qr, ...)
    special,  # noqa: E402  (af.special.erf, af.special.lgamma, ...)
)
from .numerics.paired import Paired, paired, paired_subtract
from .optimizer import canonicalize, reduce_sum_to_matmul
from .optimizer.precision_tune import tune_precision
from .optimizer.routes import route_registry
from .optimizer.tune import tune
from .reference import reference
from .targets import estimate_provenance, project_peak, resolve_target, targets

# The composition root: plug-ins defined in upper layers join the registries of the
# lower layers that use them (docs/architecture.md, "Plug-ins"). Nothing else in the
# package registers anything at import time.
register_device("simulated-ane", SimulatedANE)
_coreml_device.register()
register_exporter("coreml", export_coreml)
set_region_runner(execute_regions)

__all__ = [
    *_graph.__all__,
    "AneforgeError",
    "AneforgeWarning",
    "AttributeValueError",
    "BoundViolationWarning",
    "ConfigFileError",
    "FastPathWarning",
    "FileReadError",
    "SizeLimitError",
    "Capabilities",
    "ConstantSaturationWarning",
    "OnnxGraph",
    "OnnxImportError",
    "UnsupportedModelError",
    "from_onnx",
    "from_torch",
    "CrossChipFP16Warning",
    "DivergenceReport",
    "NodeDivergence",
    "NodeRisk",
    "PrecisionError",
    "PrecisionReport",
    "check_precision",
    "precision_risk",
    "PreflightError",
    "PreflightReport",
    "PreflightWarning",
    "Violation",
    "fp16_divergence",
    "range_analysis",
    "RangeReport",
    "RangeHazard",
    "preflight",
    "Device",
    "DeviceUnavailable",
    "DispatchFloorWarning",
    "Estimate",
    "DTypeError",
    "EmulatorDevice",
    "InputError",
    "OptionError",
    "PrecisionWarning",
    "Paired",
    "Program",
    "ShapeError",
    "SimulatedANE",
    "WeightRangeError",
    "canonicalize",
    "compare",
    "compile",
    "devices",
    "estimate",
    "estimate_breakdown",
    "get_device",
    "fft",
    "linalg",
    "models",
    "special",
    "nn",
    "paired",
    "paired_subtract",
    "reduce_sum_to_matmul",
    "reference",
    "register_device",
    "resolve_target",
    "estimate_provenance",
    "project_peak",
    "targets",
    "route_registry",
    "tune",
    "tune_precision",
    "__version__",
]
