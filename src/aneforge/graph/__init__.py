"""The graph: fp16 tensors, the op registry and the op functions.

Example:
    >>> import aneforge as af
    >>> x = af.input((2, 4))
    >>> af.softmax(x @ af.weight([[1.0] * 3] * 4)).shape
    (2, 3)
"""

from . import ops  # noqa: F401  (registers the ops)
from .api import *  # noqa: F403
from .api import __all__ as _api_all
from .naming import layer_names
from .registry import OpDef, all_ops, get_op
from .tensor import MAX_RANK, Tensor, input, make, weight

__all__ = [
    *_api_all,
    "OpDef",
    "all_ops",
    "get_op",
    "layer_names",
    "MAX_RANK",
    "Tensor",
    "input",
    "make",
    "weight",
]
