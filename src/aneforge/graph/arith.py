"""The arithmetic policy a kernel runs with: its matmul backend and its accumulator.

Every fp16 kernel is ``emulate(inputs, attrs, arith)``. :class:`Arith` is the one
explicit record of what differs between the executors that call it:

- ``matmul(a[B,M,K], b[B,K,N])``: the contraction backend (the emulator's reference or
  fast gemm, with a chip's output saturation; the precision tuner's wide gemm);
- ``route``: the chip's reduction route (None: the generic sequential model);
- ``wide``: the precision tuner's wide accumulator for narrow sums (None: the engine's).

A kernel that narrow-sums calls :meth:`Arith.narrow_sum`, which hands ``route`` and
``wide`` to the pure :func:`aneforge.graph.fp16.narrow_sum`. The constructors are
:data:`GENERIC` / :meth:`Arith.generic` (the generic model), the per-chip
``ChipNumerics.arith(mm)`` (:mod:`aneforge.emulator.chips`) and the fp32-faithful
reference's (:mod:`aneforge.optimizer.precision_tune`).

Example:
    >>> import numpy as np
    >>> from aneforge.graph.arith import Arith
    >>> ones = np.ones(4096, np.float16)
    >>> float(Arith.generic().narrow_sum(ones, 0)), float(Arith(route=384).narrow_sum(ones, 0))
    (2048.0, 4096.0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .fp16 import WIDE_MODES, narrow_sum


@dataclass(frozen=True)
class Arith:
    """The arithmetic policy of one executor (see the module docstring).

    Attributes:
        backend: the contraction backend ``(a[B,M,K], b[B,K,N]) -> array``, or None for
            a policy that runs no contraction (calling :meth:`matmul` then raises).
        route: narrow sums over more than this many terms take the split route; None
            for the generic sequential model.
        wide: the narrow sums' wide mode, one of
            :data:`~aneforge.graph.fp16.WIDE_MODES` (None: the engine's narrow sum).
        windows: an optional faster way to run a convolution's product ``W @ patches``:
            ``windows(w3, xp, kernel, stride, dilation, groups)`` with ``w3`` the
            (N*G, Cout/G, K) weights and ``xp`` the padded NCHW input gives what
            ``backend(w3, patches)`` gives, bit for bit, or None where it does not
            apply (the convolution then builds its patches).
        bias: an optional faster per-channel bias add (a convolution's; a linear's, its
            features as channels): ``bias(y, b)`` with ``b`` one fp16 value per channel
            (axis 1) shaped ``(C, 1, ...)`` gives ``y + b``'s fp16 bits, or None where it
            does not apply (the op then adds in NumPy).
    """

    backend: Callable | None = None
    route: int | None = None
    wide: str | None = None
    windows: Callable | None = None
    bias: Callable | None = None

    def __post_init__(self):
        route = self.route
        if route is not None and (
            isinstance(route, bool) or not isinstance(route, (int, np.integer)) or route < 1
        ):
            raise ValueError(f"Arith: route must be a positive integer or None, got {route!r}")
        if route is not None:
            object.__setattr__(self, "route", int(route))
        if self.wide not in WIDE_MODES:
            raise ValueError(f"Arith: wide must be one of {WIDE_MODES}, got {self.wide!r}")

    @classmethod
    def generic(
        cls,
        matmul: Callable | None = None,
        windows: Callable | None = None,
        bias: Callable | None = None,
    ) -> Arith:
        """The generic model's policy with the contraction backend ``matmul`` (and the
        convolution product ``windows`` and bias add ``bias``, see the class docstring)."""
        return cls(matmul, windows=windows, bias=bias)

    def matmul(self, a, b):
        """``(B, M, K) @ (B, K, N)`` through this policy's contraction backend."""
        if self.backend is None:
            raise TypeError(
                "Arith.matmul: this arithmetic policy has no contraction backend; build it "
                "with one, e.g. Arith.generic(gemm_reference)"
            )
        return self.backend(a, b)

    def narrow_sum(self, x, axis, keepdims: bool = False) -> np.ndarray:
        """:func:`aneforge.graph.fp16.narrow_sum` under this policy's route and wide mode.

        Example:
            >>> import numpy as np
            >>> float(Arith(wide="fp16").narrow_sum(np.ones(4096, np.float16), 0))
            4096.0
        """
        return narrow_sum(x, axis, keepdims=keepdims, route=self.route, wide=self.wide)


#: The generic model without a contraction backend (kernels that never contract).
GENERIC = Arith()


def as_arith(arith) -> Arith:
    """``arith`` as an :class:`Arith`: an Arith is itself, None is :data:`GENERIC` and a
    bare contraction backend (the older ``mm`` argument) is the generic policy with it.

    Example:
        >>> as_arith(None) is GENERIC, as_arith(GENERIC) is GENERIC
        (True, True)
    """
    if arith is None:
        return GENERIC
    if isinstance(arith, Arith):
        return arith
    if callable(arith):
        return Arith(arith)
    raise TypeError(
        f"a kernel's arith must be an Arith, a matmul backend or None, got {type(arith).__name__}"
    )
