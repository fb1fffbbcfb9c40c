"""``SimulatedANE``: a deterministic device whose timings come from the cost model.

It exists to test tuner logic (``af.tune(..., device=af.SimulatedANE())``): outputs are
the emulator's, timings the estimate times seeded noise. It is registered as the
``'simulated-ane'`` device when aneforge is imported.
"""

from __future__ import annotations

import numpy as np

from ..devices import Capabilities, TimedDevice, numerics_target
from ..emulator.chips import chip_numerics
from ..emulator.interpreter import execute_fp16
from ..errors import OptionError
from ..graph.hashing import structural_hash
from ..targets.names import resolve_target
from .estimate import estimate


class SimulatedANE(TimedDevice):
    """A SIMULATOR for testing tuner logic, not a real engine.

    ``run`` is the bit-faithful emulator; ``measure`` returns the cost model's estimate
    (in seconds) times ``1 + noise * z``, with ``z`` a standard normal drawn from a
    generator seeded by ``seed`` and the program's structural hash, so the same program
    always "measures" the same. Use it to exercise tune() deterministically.

    ``target`` works as for :class:`EmulatorDevice` (None: the program's own target);
    with a chip target, ``measure`` uses the analytic per-chip cost model.

    Example:
        >>> import aneforge as af
        >>> x = af.input((64, 256))
        >>> prog = af.compile(x.relu())
        >>> seconds = af.SimulatedANE(noise=0.0).measure(prog, [])
        >>> round(seconds * 1e6, 6) == round(af.estimate(prog), 6)
        True
    """

    def __init__(self, target=None, noise: float = 0.05, seed: int = 0):
        chip_numerics(target)  # refuse unknown names and family 1 now
        if not 0 <= noise < 1:
            raise OptionError(f"SimulatedANE: noise must be in [0, 1), got {noise!r}")
        self.target, self.noise, self.seed = target, noise, seed
        self.name = "simulated-ane"
        self.cache_id = f"simulated-ane(noise={noise!r},seed={seed!r})"
        self.capabilities = Capabilities(
            bit_faithful=True,
            real_hardware=False,
            description="emulator outputs, cost-model timings with seeded noise",
        )

    def run(self, program, inputs):
        return execute_fp16(program, inputs, fast=True, target=numerics_target(self, program))

    def measure(self, program, inputs, repeat: int = 5) -> float:
        digest = structural_hash(list(program.outputs), extra=f"seed={self.seed}")
        z = np.random.default_rng(int(digest[:16], 16)).standard_normal()
        target = numerics_target(self, program)
        arch = resolve_target(target).arch if chip_numerics(target) is not None else None
        return estimate(program, target=arch) * 1e-6 * max(0.05, 1.0 + self.noise * z)
