"""What the GEMM derives from a weight (its packed panels, its largest magnitude),
computed on the first call and reused on every later one.

Only operands that can never change are remembered: views of immutable arrays
(:mod:`aneforge.graph.frozen`: a program's weights). Anything else (an input, an
intermediate, a user's writeable array) is derived afresh on each call, so the memo
never changes a result, only the time to it. An entry is keyed by the frozen array (by
identity, dropped when it is freed), the view's byte offset, shape and strides,
and what was derived. Arrays held are capped at :func:`budget_bytes` (least recently
used out first): ``$ANEFORGE_PANEL_CACHE_MB`` megabytes, 512 by default, 0 for none.

Example:
    >>> import numpy as np
    >>> from aneforge.graph.frozen import freeze
    >>> w = freeze(np.arange(6, dtype=np.float16).reshape(2, 3))
    >>> memo = OperandMemo()
    >>> first = memo.get(w.T, "copy", np.array)
    >>> memo.get(w.T, "copy", np.array) is first  # derived once
    True
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from ..errors import OptionError
from ..graph.frozen import frozen_owner

__all__ = ["BUDGET_ENV", "MEMO", "OperandMemo", "budget_bytes"]

BUDGET_ENV = "ANEFORGE_PANEL_CACHE_MB"
DEFAULT_MB = 512


def budget_bytes() -> int:
    """Bytes of derived arrays the memo may hold: ``$ANEFORGE_PANEL_CACHE_MB`` megabytes
    (a non-negative number), else 512 MB.

    Example:
        >>> budget_bytes() >= 0
        True
    """
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0:  # also NaN
        raise OptionError(
            f"${BUDGET_ENV}={raw!r} must be the megabytes of packed weight panels to keep, "
            f"a number >= 0 (default {DEFAULT_MB}; 0 keeps none)"
        )
    return int(mb * (1 << 20))


class OperandMemo:
    """A least-recently-used memo of values derived from frozen operands (see the
    module docstring); thread-safe. ``budget`` caps the bytes of arrays held (None:
    :func:`budget_bytes`, read on each insertion)."""

    def __init__(self, budget: int | None = None):
        self._budget = budget
        self._entries: OrderedDict = OrderedDict()  # key -> (value, nbytes)
        self._owners: dict[int, set] = {}  # id of a frozen array -> its keys
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """Bytes of the arrays held now."""
        return self._held

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, x: np.ndarray, what: Hashable, derive: Callable[[np.ndarray], object]):
        """``derive(x)``, remembered under ``what`` when ``x`` is a view of a frozen
        array (and the value, when an array, fits the budget). ``derive`` must return a
        new object, never a view of ``x``: that would keep the frozen array alive."""
        owner = frozen_owner(x)
        if owner is None:
            return derive(x)
        offset = x.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
        key = (id(owner), offset, x.shape, x.strides, x.dtype.str, what)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[0]
        value = derive(x)
        size = value.nbytes if isinstance(value, np.ndarray) else 0
        budget = budget_bytes() if self._budget is None else self._budget
        if size > budget:
            return value
        with self._lock:
            if key not in self._entries:
                keys = self._owners.get(id(owner))
                if keys is None:
                    keys = self._owners[id(owner)] = set()
                    weakref.finalize(owner, self._forget_owner, id(owner))
                keys.add(key)
                self._entries[key] = (value, size)
                self._held += size
            while self._held > budget:
                self._drop(next(iter(self._entries)))
        return value

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            for key in list(self._entries):
                self._drop(key)

    def _drop(self, key) -> None:  # the lock is held
        _, size = self._entries.pop(key)
        self._held -= size
        keys = self._owners.get(key[0])
        if keys is not None:
            keys.discard(key)

    def _forget_owner(self, owner_id: int) -> None:
        """The frozen array ``owner_id`` was freed: drop its entries (its id may be
        reused by a new array)."""
        with self._lock:
            for key in self._owners.pop(owner_id, ()):
                if key in self._entries:
                    _, size = self._entries.pop(key)
                    self._held -= size


#: The emulator's memo (the GEMM's packed weight panels and magnitude scans).
MEMO = OperandMemo()
