"""What the hostile-input tests share: a deadline that turns a hang into a failure."""

from __future__ import annotations

import contextlib
import signal


@contextlib.contextmanager
def deadline(seconds: float, what: str):
    """Fail (not hang) when the body runs past ``seconds``: SIGALRM interrupts even a
    blocking ``open`` of a FIFO. Main thread only (as pytest runs tests)."""

    def expire(_sig, _frame):
        raise TimeoutError(f"{what}: still running after {seconds} s (a hang)")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
