"""Devices: where a Program runs. A device implements the :class:`Device` protocol.

``run(program, inputs)`` takes fp16 arrays in program-input order and returns fp16
arrays; ``measure(program, inputs)`` returns seconds per run (median of repeats). The
emulator is the default device. Other devices register through :func:`register_device`
without touching the compiler: the package registers the cost-model simulator
(``'simulated-ane'``, :mod:`aneforge.cost.simulated`) and Core ML on a Mac (``'coreml'``,
:mod:`aneforge.io.coreml_device`), which live in the layers above this one.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((2,))
    >>> dev = af.get_device("emulator")
    >>> dev.run(af.compile(x + 1.0), [np.zeros(2, np.float16)])[0]
    array([1., 1.], dtype=float16)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .emulator.chips import chip_numerics
from .emulator.interpreter import execute_fp16
from .errors import OptionError


@dataclass(frozen=True)
class Capabilities:
    """What a device can do: whether it is bit-faithful to the engine and where it runs."""

    bit_faithful: bool
    real_hardware: bool
    description: str


@runtime_checkable
class Device(Protocol):
    """The protocol every device implements."""

    name: str
    capabilities: Capabilities

    def run(self, program, inputs: list[np.ndarray]) -> list[np.ndarray]: ...

    def measure(self, program, inputs: list[np.ndarray], repeat: int = 5) -> float: ...


class TimedDevice:
    """Shared ``measure``: ``warmups`` untimed runs (one by default), then the median
    wall time of ``repeat`` runs."""

    warmups: int = 1

    def measure(self, program, inputs, repeat: int = 5) -> float:
        for _ in range(self.warmups):
            self.run(program, inputs)
        times = []
        for _ in range(max(1, repeat)):
            start = time.perf_counter()
            self.run(program, inputs)
            times.append(time.perf_counter() - start)
        return statistics.median(times)


class EmulatorDevice(TimedDevice):
    """The bit-faithful fp16 emulator on the CPU.

    ``fast=True`` uses the compiled matmul kernels, ``fast=False`` the plain NumPy
    reference interpreter; both give identical bits.

    ``target`` chooses the per-chip numerics (docs/numerics.md, "Per-chip numerics"):
    ``None`` (the default) runs each program with the numerics of the target it was
    compiled for (the generic model when it has none); an architecture or chip name
    (``'h13'``, ``'M1'``) or a Target overrides that; ``'generic'`` forces the generic,
    chip-independent model.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((1, 8))
        >>> prog = af.compile(x[:, 1:])
        >>> big = np.full((1, 8), 5000.0)
        >>> float(af.EmulatorDevice(target="M1").run(prog, [big.astype(np.float16)])[0][0, 0])
        inf
    """

    # a region not yet checked on this machine runs op by op on its first call and
    # compiles on its second: measure from the third
    warmups = 2

    def __init__(self, fast: bool = True, target=None):
        chip_numerics(target)  # refuse unknown names and family 1 now, not at run time
        self.fast = fast
        self.target = target
        self.name = "emulator" if fast else "reference"
        where = "" if target is None else f", target {target}"
        self.capabilities = Capabilities(
            bit_faithful=True,
            real_hardware=False,
            description="ANE fp16 arithmetic emulated on the CPU"
            + ("" if fast else " (NumPy reference interpreter)")
            + where,
        )

    def run(self, program, inputs):
        target = numerics_target(self, program)
        return execute_fp16(program, inputs, fast=self.fast, target=target)


def numerics_target(device, program):
    """The target whose numerics ``device`` runs ``program`` with (None: generic)."""
    if device.target is not None:
        return device.target
    return getattr(program, "target", None)


_FACTORIES: dict[str, Callable[[], Device]] = {
    "emulator": lambda: EmulatorDevice(fast=True),
    "reference": lambda: EmulatorDevice(fast=False),
}


def register_device(name: str, factory: Callable[[], Device]) -> None:
    """Make ``get_device(name)`` return ``factory()``; names are unique."""
    if name in _FACTORIES:
        raise OptionError(f"a device named '{name}' is already registered")
    _FACTORIES[name] = factory


def devices() -> list[str]:
    """Names of the registered devices."""
    return sorted(_FACTORIES)


def get_device(device=None) -> Device:
    """Resolve ``device``: None (the emulator), a registered name, or a Device.

    Raises :class:`~aneforge.errors.DeviceUnavailable` when the device cannot run here,
    :class:`~aneforge.errors.OptionError` for a name that is not registered or a value
    that is no device at all.
    """
    if device is None:
        device = "emulator"
    if isinstance(device, str):
        try:
            factory = _FACTORIES[device]
        except KeyError:
            raise OptionError(
                f"unknown device '{device}'; registered devices: {', '.join(devices())}"
            ) from None
        return factory()
    if isinstance(device, Device):
        return device
    raise OptionError(
        f"device {device!r} ({type(device).__name__}) is neither a registered device name "
        f"({', '.join(devices())}) nor an object implementing the Device protocol"
    )
