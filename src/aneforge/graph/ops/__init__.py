"""The op definitions. Importing this package registers every op."""

from . import (  # noqa: F401
    bridge,
    contraction,
    elementwise,
    extra,
    norm,
    reduce,
    shape,
    source,
    spatial,
)
