"""The op definitions. Importing this package registers every op."""

from . import bridge, contraction, elementwise, norm, reduce, shape, source, spatial  # noqa: F401
