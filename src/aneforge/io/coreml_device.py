"""The Core ML device: run and time a Program on a Mac's Neural Engine through Core ML.

:class:`CoreMLDevice` implements the :class:`~aneforge.devices.Device` protocol.
``run`` exports the program (:func:`~aneforge.io.coreml_export.export_coreml`) to a
package in the device's temporary folder, loads it once with
``compute_units=ct.ComputeUnit.CPU_AND_NE`` (the default; Core ML decides per op whether
the Neural Engine or the CPU runs it) and predicts. Compiled models are cached per
structural hash of the program, so ``tune(device="coreml")`` exports each variant once.
``measure`` times predictions only (export and load excluded): one warm-up, then the
median wall time of ``repeat`` calls.

It is real hardware, not bit-faithful: Core ML chooses its own kernels (see
docs/export.md), so compare its outputs with the emulator at fp16 tolerances.

Off macOS (or without coremltools) the constructor raises
:class:`~aneforge.errors.DeviceUnavailable` saying why: coremltools cannot load or run
models on Linux. :func:`register` adds the device to aneforge's registry as ``"coreml"``.

Example:
    >>> from aneforge.io.coreml_device import unavailable_reason
    >>> reason = unavailable_reason()  # None on a Mac with coremltools
    >>> reason is None or "Core ML device needs" in reason
    True
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
import weakref
from pathlib import Path

import numpy as np

from ..devices import Capabilities, devices, register_device
from ..errors import DeviceUnavailable, OptionError
from ..graph.hashing import structural_hash
from .coreml_export import _ct, export_coreml

COMPUTE_UNITS = ("CPU_AND_NE", "ALL", "CPU_ONLY", "CPU_AND_GPU")
NAME = "coreml"


def unavailable_reason() -> str | None:
    """Why the Core ML device cannot run here, or None when it can."""
    if sys.platform != "darwin":
        return (
            f"the Core ML device needs macOS: coremltools cannot load or run models on "
            f"{sys.platform}. Export with aneforge.io.coreml_export.export_coreml and run "
            "the package on a Mac, or use the 'emulator' device here"
        )

    try:
        _ct()
    except Exception as err:  # ExportError: coremltools is missing
        return f"the Core ML device needs coremltools: {err}"
    return None


class CoreMLDevice:
    """Core ML on this Mac (the Neural Engine and the CPU by default).

    Args:
        compute_units: a ``ct.ComputeUnit`` name, default ``'CPU_AND_NE'``.
        target / minimum_deployment_target: passed to the exporter (default: the
            program's target, else iOS 17 / macOS 14).
        io_dtype: the package's input/output type, ``'float16'`` (default) or
            ``'float32'``.

    Raises:
        DeviceUnavailable: not macOS, or coremltools is missing.
    """

    def __init__(
        self,
        compute_units: str = "CPU_AND_NE",
        target=None,
        minimum_deployment_target=None,
        io_dtype=None,
    ):
        if compute_units not in COMPUTE_UNITS:
            raise OptionError(
                f"CoreMLDevice: compute_units must be one of {COMPUTE_UNITS}, got {compute_units!r}"
            )
        reason = unavailable_reason()
        if reason is not None:
            raise DeviceUnavailable(reason)

        self._ct = _ct()
        self.name = NAME
        self.compute_units = compute_units
        self.options = {
            "target": target,
            "minimum_deployment_target": minimum_deployment_target,
            "io_dtype": io_dtype,
        }
        self.cache_id = f"coreml({compute_units})"
        self.capabilities = Capabilities(
            bit_faithful=False,
            real_hardware=True,
            description=f"Core ML on this Mac (compute_units={compute_units})",
        )
        self._dir = Path(tempfile.mkdtemp(prefix="aneforge-coreml-"))
        weakref.finalize(self, shutil.rmtree, self._dir, True)
        self._models: dict[str, tuple] = {}

    def _model(self, program):
        """(MLModel, input names, output names, output shapes, feature dtype), exported
        once per structural hash of the program and the export options."""

        where = getattr(program, "target", None)  # sets the deployment target by default
        extra = f"{sorted(self.options.items())!r}|{getattr(where, 'arch', where)!r}"
        key = structural_hash(list(program.outputs), extra=extra)
        if key not in self._models:
            path = self._dir / f"{key[:16]}.mlpackage"
            _, low = export_coreml(program, path, return_lowering=True, **self.options)
            units = getattr(self._ct.ComputeUnit, self.compute_units)
            model = self._ct.models.MLModel(str(path), compute_units=units)
            dtype = np.float16 if low.io_dtype == "float16" else np.float32
            shapes = [t.shape for t in program.outputs]
            self._models[key] = (model, low.input_names, low.output_names, shapes, dtype)
        return self._models[key]

    def _feed(self, program, inputs):
        model, in_names, out_names, shapes, dtype = self._model(program)
        feed = {
            n: np.asarray(x, dtype=dtype if t.dtype == "float16" else np.int32).reshape(
                t.shape or (1,)
            )
            for n, x, t in zip(in_names, inputs, program.inputs)
        }
        return model, feed, out_names, shapes

    def run(self, program, inputs) -> list[np.ndarray]:
        """Predict once; fp16 arrays in program-output order."""
        model, feed, out_names, shapes = self._feed(program, inputs)
        result = model.predict(feed)
        return [
            np.asarray(result[n], dtype=np.float16).reshape(s) for n, s in zip(out_names, shapes)
        ]

    def measure(self, program, inputs, repeat: int = 5) -> float:
        """Median seconds per prediction (after one warm-up); export and load excluded."""
        model, feed, _, _ = self._feed(program, inputs)
        model.predict(feed)
        times = []
        for _ in range(max(1, repeat)):
            start = time.perf_counter()
            model.predict(feed)
            times.append(time.perf_counter() - start)
        return statistics.median(times)


def register() -> None:
    """Add ``"coreml"`` to the device registry (``af.get_device("coreml")``,
    ``af.tune(device="coreml")``); calling it again does nothing. Off macOS the name is
    listed but resolving it raises :class:`~aneforge.errors.DeviceUnavailable`."""

    if NAME not in devices():
        register_device(NAME, CoreMLDevice)
