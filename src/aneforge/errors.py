"""Errors and warnings raised by aneforge.

Every mistake a user can make raises an :class:`AneforgeError` subclass whose message
names the op or input, the offending value and what to do instead. The subclasses also
derive from the matching built-in (``ValueError``, ``TypeError``) so generic handlers
keep working.

Example:
    >>> import aneforge as af
    >>> try:
    ...     af.input((1, 2, 3, 4, 5, 6))
    ... except af.AneforgeError as err:
    ...     print(type(err).__name__)
    ShapeError
"""

from __future__ import annotations


class AneforgeError(Exception):
    """Base class of every error caused by how aneforge was used."""


class ShapeError(AneforgeError, ValueError):
    """An op received shapes it cannot combine, or a rank the engine cannot hold."""


class AttributeValueError(AneforgeError, ValueError):
    """An op attribute (axis, stride, kernel size, ...) is out of range or malformed."""


class DTypeError(AneforgeError, TypeError):
    """A value's dtype cannot enter the fp16 dataplane (integers, bool, complex, ...)."""


class WeightRangeError(AneforgeError, ValueError):
    """A weight holds values that overflow fp16 (they round past 65504: |x| >= 65520)."""


class InputError(AneforgeError, ValueError):
    """A program was called with missing, extra or mis-shaped inputs."""


class OptionError(AneforgeError, ValueError):
    """An option passed to compile, a device or the CLI is not one aneforge knows."""


class DeviceUnavailable(AneforgeError, RuntimeError):
    """The requested device cannot run on this machine (e.g. Core ML off macOS)."""


class PreflightError(AneforgeError, ValueError):
    """A graph cannot compile for the requested target (every violation is listed)."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class SizeLimitError(AneforgeError, ValueError):
    """A tensor, a folded constant, a random input or a file would pass aneforge's size
    limits (:mod:`aneforge.limits`); the message gives the size it would take."""


class FileReadError(AneforgeError, OSError):
    """A file aneforge was asked to read is not a regular file, cannot be read, or is
    larger than the limit for its kind."""


class ConfigFileError(AneforgeError, ValueError):
    """A configuration file aneforge reads (the kernel envelope) is malformed; the
    message names the file and the problem, and how to rewrite it."""


class BundledDataError(AneforgeError, RuntimeError):
    """A data file shipped inside aneforge (``aneforge/data``) is missing or malformed:
    the installation is broken, not the call; reinstall aneforge or rerun the script
    that writes the file."""


class AneforgeWarning(UserWarning):
    """Base class of aneforge's warnings."""


class PrecisionWarning(AneforgeWarning):
    """A computation is likely to lose accuracy in fp16."""


class DispatchFloorWarning(AneforgeWarning):
    """A program's predicted latency is dominated by the per-call dispatch floor."""


class PreflightWarning(AneforgeWarning):
    """compile(target=...) replaced ops the target lacks by equivalent lowerings."""


class CrossChipFP16Warning(AneforgeWarning):
    """A program's fp16 results on its target can differ from other engine generations."""


class FastPathWarning(AneforgeWarning, RuntimeWarning):
    """A compiled emulator kernel cannot be used here (numba does not import, or the kernel
    does not compile or fails its first-use check); the NumPy reference serves every call
    instead, with the same bits, only slower. Issued once per process and cause."""


class BoundViolationWarning(AneforgeWarning):
    """A measured time beats the bound its exact counts and the envelope give: the
    envelope's peaks are too low for this device (refit them with
    ``aneforge fit-envelope``). Issued once per backend, device and code digest."""
