"""The public op functions (``af.relu``, ``af.conv``, ...) and the Tensor methods.

Unary and binary elementwise functions are generated from the op registry, so their
docstrings come from the op records; the rest are written out for their signatures.
Every function takes a keyword-only ``name=`` (a non-empty string) that labels the node
it returns: metadata for layer tables and the Core ML export, never part of what the
node computes. The Tensor methods are these functions, so ``x.relu(name="act")`` works.

Arguments are named as NumPy names them where NumPy has the function (``axis=`` and
``keepdims=`` of the reductions, ``axis=`` of ``squeeze`` and ``expand_dims``, ``axes``
of ``transpose``, ``shape`` of ``reshape``), else as PyTorch does (``padding=``,
``kernel_size=``, ``scale_factor=``, ``num_groups=``, ``upscale_factor=`` and
``downscale_factor=``). The methods also take NumPy's varargs (``x.reshape(2, -1)``,
``x.transpose(1, 0)``), and ``x.max()`` / ``x.min()`` are ``amax`` / ``amin``. The names
used before (``axes=`` of the reductions, squeeze and expand_dims, ``perm=``, ``pad=``,
``kernel=``, ``scale=``, ``groups=`` of group_norm, ``factor=``) still work for one
release, with a ``DeprecationWarning`` naming the new one; giving both spellings is an
:class:`~aneforge.errors.OptionError`. Node attributes keep their names
(``node.attrs["axes"]``, ``node.attrs["pad"]``).

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((2, 8), name="x")
    >>> af.softmax(af.matmul(x, np.ones((8, 4)), name="fc"), name="probs").name
    'probs'
"""

from __future__ import annotations

import functools
import inspect
import warnings

import numpy as np

from ..errors import AttributeValueError, OptionError, ShapeError
from .ops.elementwise import BINARY, COMPARE, UNARY
from .ops.shape import getitem
from .registry import check_int, describe, get_op
from .tensor import Tensor, as_tensor, make


def _take_alias(fn: str, old: str, new: str, value, new_given: bool, whose: str, depth=3):
    """``value`` given under the deprecated keyword ``old``: warn that ``new`` replaces
    it (``whose`` name it is), or raise :class:`OptionError` when ``new`` was given too.
    ``depth`` is the warning's stacklevel: the frame of the public function's caller."""
    if new_given:
        raise OptionError(
            f"{fn}: got both {new}= and {old}=, its deprecated alias; pass {new}= only"
        )
    warnings.warn(
        f"{fn}: {old}= is deprecated and goes in the next release; pass {new}= ({whose} "
        "name) instead",
        DeprecationWarning,
        stacklevel=depth,
    )
    return value


def _renamed(**aliases):
    """Let a function take each deprecated keyword ``old=`` of ``aliases`` (mapped to
    ``(new, whose)``) for one release, as ``new=``: see :func:`_take_alias`.

    Example:
        >>> import warnings, aneforge as af
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     warnings.simplefilter("always")
        ...     shape = af.sum(af.input((2, 3)), axes=1).shape
        >>> shape, str(seen[0].message).split(";")[0]
        ((2,), 'sum: axes= is deprecated and goes in the next release')
    """

    def wrap(fn):
        params = list(inspect.signature(fn).parameters)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, (new, whose) in aliases.items():
                if old in kwargs:
                    given = new in kwargs or len(args) > params.index(new)
                    kwargs[new] = _take_alias(fn.__name__, old, new, kwargs.pop(old), given, whose)
            return fn(*args, **kwargs)

        return call

    return wrap


_NUMPY, _TORCH = "NumPy's", "PyTorch's"


def _unary_function(name: str):
    op = get_op(name)
    attrs = ", ".join(f"{k}={v.default!r}" for k, v in op.attrs.items())

    def fn(x, *, name=None, **kwargs):
        return make(op.name, x, name=name, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"Elementwise {name}: {op.doc}.\n\n"
        f"Signature: ``{name}(x{', ' + attrs if attrs else ''}, *, name=None)``; fp16 in, "
        "fp16 out, rounded once. ``name`` labels the node (layer tables, Core ML).\n\n"
        f"Example:\n    >>> import aneforge as af\n    >>> af.{name}(af.input((4,))).shape\n"
        "    (4,)\n"
    )
    return fn


def _binary_function(name: str):
    op = get_op(name)

    def fn(a, b, *, name=None):
        return make(op.name, a, b, name=name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"Elementwise {name}: {op.doc}, with NumPy broadcasting; scalars and arrays "
        "become fp16 weights. ``name=`` labels the node.\n\n"
        f"Example:\n    >>> import aneforge as af\n    >>> af.{name}(af.input((2, 3)), 2.0).shape\n"
        "    (2, 3)\n"
    )
    return fn


ELEMENTWISE = {n: _unary_function(n) for n in UNARY}
ELEMENTWISE.update({n: _binary_function(n) for n in (*BINARY, *COMPARE)})
globals().update(ELEMENTWISE)


def select(cond, a, b, *, name=None) -> Tensor:
    """``a`` where ``cond != 0`` else ``b``; all three broadcast.

    Example:
        >>> import aneforge as af
        >>> x = af.input((3,))
        >>> af.select(x > 0, x, 0.0).shape
        (3,)
    """
    return make("select", cond, a, b, name=name)


def matmul(a, b, *, name=None) -> Tensor:
    """``a @ b`` with NumPy matmul semantics; a weight on the right is a weight matmul.

    Example:
        >>> import numpy as np, aneforge as af
        >>> (af.input((2, 8)) @ np.ones((8, 4))).shape
        (2, 4)
    """
    a, b = as_tensor(a, "matmul lhs"), as_tensor(b, "matmul rhs")
    return make("matmul" if b.op == "weight" else "bmm", a, b, name=name)


def bmm(a, b, *, name=None) -> Tensor:
    """Batched ``a @ b`` between two tensors (batch dims broadcast).

    Example:
        >>> import aneforge as af
        >>> af.bmm(af.input((4, 2, 8)), af.input((4, 8, 3))).shape
        (4, 2, 3)
    """
    return make("bmm", a, b, name=name)


def linear(x, weight, bias=None, *, name=None) -> Tensor:
    """``x @ weight.T + bias`` with ``weight`` of shape [out_features, in_features].

    Example:
        >>> import numpy as np, aneforge as af
        >>> af.linear(af.input((2, 8)), np.zeros((4, 8)), np.zeros(4)).shape
        (2, 4)
    """
    srcs = (x, weight) if bias is None else (x, weight, bias)
    return make("linear", *srcs, name=name)


@_renamed(pad=("padding", _TORCH))
def conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, name=None) -> Tensor:
    """1-D (NCW) or 2-D (NCHW) convolution; weight [Cout, Cin/groups, (kh), kw].

    The arguments are PyTorch's ``F.conv2d``'s, in its order. ``padding`` is one int, one
    per spatial dim, or begins-then-ends (ONNX order); ``pad=`` is its deprecated alias.

    Example:
        >>> import numpy as np, aneforge as af
        >>> af.conv(af.input((1, 3, 8, 8)), np.zeros((4, 3, 3, 3)), padding=1).shape
        (1, 4, 8, 8)
    """
    srcs = (x, weight) if bias is None else (x, weight, bias)
    return make(
        "conv", *srcs, stride=stride, pad=padding, dilation=dilation, groups=groups, name=name
    )


@_renamed(pad=("padding", _TORCH))
def conv_transpose(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1, *, name=None
) -> Tensor:
    """Transposed convolution; weight [Cin, Cout/groups, (kh), kw] (PyTorch layout).

    ``padding`` as in :func:`conv` (``pad=`` is its deprecated alias). Unlike PyTorch's
    ``F.conv_transpose2d``, ``dilation`` comes before ``groups``: pass both by keyword.

    Example:
        >>> import numpy as np, aneforge as af
        >>> af.conv_transpose(af.input((1, 4, 8, 8)), np.zeros((4, 2, 2, 2)), stride=2).shape
        (1, 2, 16, 16)
    """
    srcs = (x, weight) if bias is None else (x, weight, bias)
    return make(
        "conv_transpose",
        *srcs,
        stride=stride,
        pad=padding,
        output_padding=output_padding,
        dilation=dilation,
        groups=groups,
        name=name,
    )


def _reduction(op_name):
    def fn(x, axis=None, keepdims=False, *, name=None):
        if isinstance(axis, int):
            axis = (axis,)
        return make(op_name, x, axes=axis, keepdims=keepdims, name=name)

    fn.__name__ = fn.__qualname__ = op_name
    fn.__doc__ = (
        f"{get_op(op_name).doc} over ``axis`` (an int or a tuple of them; all axes when "
        "None), as NumPy's ``axis=`` and ``keepdims=``; ``axes=`` is a deprecated alias of "
        "``axis=``. ``name=`` labels the node.\n\n"
        f"Example:\n    >>> import aneforge as af\n"
        f"    >>> af.{op_name}(af.input((2, 3)), axis=-1).shape\n    (2,)\n"
    )
    return _renamed(axes=("axis", _NUMPY))(fn)


sum = _reduction("sum")  # noqa: A001  (mirrors NumPy's name)
mean = _reduction("mean")
amax = _reduction("amax")
amin = _reduction("amin")
max = amax  # noqa: A001  (NumPy's np.max is np.amax)
min = amin  # noqa: A001  (NumPy's np.min is np.amin)


def softmax(x, axis=-1, *, name=None) -> Tensor:
    """Softmax along ``axis`` (max-subtracted, narrow fp16 sum).

    Example:
        >>> import aneforge as af
        >>> af.softmax(af.input((2, 5))).shape
        (2, 5)
    """
    return make("softmax", x, axis=axis, name=name)


def cumsum(x, axis=-1, *, name=None) -> Tensor:
    """Cumulative sum over the last axis (lowered as ``x @ triu_ones``).

    Example:
        >>> import aneforge as af
        >>> af.cumsum(af.input((2, 5))).shape
        (2, 5)
    """
    x = as_tensor(x, "cumsum input")
    axis = check_int(axis, "cumsum", None, "axis")
    if axis not in (-1, len(x.shape) - 1):
        raise ShapeError(
            f"cumsum: only the last axis is supported, got axis={axis} for shape {x.shape}; "
            "transpose the axis to the end first"
        )
    return make("cumsum", x, name=name)


def _affine_srcs(x, weight, bias):
    srcs = [x] + [p for p in (weight, bias) if p is not None]
    return srcs, {"has_weight": weight is not None, "has_bias": bias is not None}


def layer_norm(x, weight=None, bias=None, axis=-1, eps=1e-5, *, name=None) -> Tensor:
    """Layer normalization over axes ``[axis, ndim)``; weight/bias of that shape.

    Example:
        >>> import aneforge as af
        >>> af.layer_norm(af.input((2, 8))).shape
        (2, 8)
    """
    srcs, flags = _affine_srcs(x, weight, bias)
    return make("layer_norm", *srcs, axis=axis, eps=eps, **flags, name=name)


def rms_norm(x, weight=None, axis=-1, eps=1e-5, *, name=None) -> Tensor:
    """RMS normalization over axes ``[axis, ndim)``.

    Example:
        >>> import aneforge as af
        >>> af.rms_norm(af.input((2, 8))).shape
        (2, 8)
    """
    srcs = [x] if weight is None else [x, weight]
    return make("rms_norm", *srcs, axis=axis, eps=eps, has_weight=weight is not None, name=name)


@_renamed(groups=("num_groups", _TORCH))
def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, *, name=None) -> Tensor:
    """Group normalization of [N, C, ...] over ``num_groups`` channel groups (PyTorch's
    name; ``groups=`` is its deprecated alias); weight/bias of shape (C,).

    Example:
        >>> import aneforge as af
        >>> af.group_norm(af.input((1, 8, 4, 4)), num_groups=2).shape
        (1, 8, 4, 4)
    """
    srcs, flags = _affine_srcs(x, weight, bias)
    return make("group_norm", *srcs, groups=num_groups, eps=eps, **flags, name=name)


def batch_norm(x, mean, var, weight=None, bias=None, eps=1e-5, *, name=None) -> Tensor:
    """Inference batch normalization of [N, C, ...] with per-channel statistics.

    Example:
        >>> import numpy as np, aneforge as af
        >>> af.batch_norm(af.input((1, 3, 4, 4)), np.zeros(3), np.ones(3)).shape
        (1, 3, 4, 4)
    """
    srcs, flags = _affine_srcs(x, weight, bias)
    srcs = [srcs[0], mean, var] + srcs[1:]
    return make("batch_norm", *srcs, eps=eps, **flags, name=name)


def l2_norm(x, axis=-1, eps=1e-6, *, name=None) -> Tensor:
    """``x / sqrt(max(sum(x**2), eps))`` along ``axis``.

    Example:
        >>> import aneforge as af
        >>> af.l2_norm(af.input((2, 8))).shape
        (2, 8)
    """
    return make("l2_norm", x, axis=axis, eps=eps, name=name)


@_renamed(kernel=("kernel_size", _TORCH), pad=("padding", _TORCH))
def max_pool(x, kernel_size, stride=None, padding=0, *, name=None) -> Tensor:
    """Max pooling over NCW / NCHW windows (stride defaults to the kernel size).

    The arguments are PyTorch's ``F.max_pool2d``'s; ``kernel=`` and ``pad=`` are
    deprecated aliases of ``kernel_size=`` and ``padding=``.

    Example:
        >>> import aneforge as af
        >>> af.max_pool(af.input((1, 3, 8, 8)), 2).shape
        (1, 3, 4, 4)
    """
    return make("max_pool", x, kernel=kernel_size, stride=stride, pad=padding, name=name)


@_renamed(kernel=("kernel_size", _TORCH), pad=("padding", _TORCH))
def avg_pool(
    x, kernel_size, stride=None, padding=0, count_include_pad=False, *, name=None
) -> Tensor:
    """Average pooling over NCW / NCHW windows (narrow fp16 sum).

    Arguments as in :func:`max_pool`. ``count_include_pad`` defaults to False (the ONNX
    default; PyTorch's ``F.avg_pool2d`` defaults to True).

    Example:
        >>> import aneforge as af
        >>> af.avg_pool(af.input((1, 3, 8, 8)), 2).shape
        (1, 3, 4, 4)
    """
    return make(
        "avg_pool",
        x,
        kernel=kernel_size,
        stride=stride,
        pad=padding,
        count_include_pad=count_include_pad,
        name=name,
    )


@_renamed(scale=("scale_factor", _TORCH))
def upsample(x, scale_factor, mode="nearest", align_corners=False, *, name=None) -> Tensor:
    """Integer-factor upsampling of NCW / NCHW, ``mode`` 'nearest' or 'bilinear'.

    ``scale_factor`` is PyTorch's name (``scale=`` is its deprecated alias).

    Example:
        >>> import aneforge as af
        >>> af.upsample(af.input((1, 3, 4, 4)), 2).shape
        (1, 3, 8, 8)
    """
    return make(
        "upsample", x, scale=scale_factor, mode=mode, align_corners=align_corners, name=name
    )


def _one_sequence(fn: str, args: tuple, key: str, kwargs: dict, old: str | None = None):
    """The value of a NumPy varargs parameter: ``args`` as one tuple of ints
    (``x.reshape(2, 3)``), its single item (``x.reshape((2, 3))``, ``x.reshape(-1)``), or
    the keyword ``key=`` (or the deprecated ``old=``) instead; None when none is given.
    Any other keyword is a TypeError, as Python raises it."""
    value = args[0] if len(args) == 1 else (args or None)
    given = bool(args)
    if key in kwargs:
        if given:
            raise OptionError(
                f"{fn}: got {key} twice, as arguments {args} and as {key}={kwargs[key]!r}; "
                "give it once"
            )
        value, given = kwargs.pop(key), True
    if old is not None and old in kwargs:
        value = _take_alias(fn, old, key, kwargs.pop(old), given, _NUMPY, depth=4)
    if kwargs:
        raise TypeError(f"{fn}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    return value


def reshape(x, *shape, name=None, **kwargs) -> Tensor:
    """Same elements in a new shape (one -1 is inferred), as NumPy's ``reshape``.

    ``shape`` is one tuple (``af.reshape(x, (3, -1))``), separate ints
    (``x.reshape(3, -1)``), one int (``x.reshape(-1)`` flattens) or ``shape=``.

    Example:
        >>> import aneforge as af
        >>> af.reshape(af.input((2, 6)), (3, -1)).shape
        (3, 4)
        >>> af.input((2, 6)).reshape(-1).shape, af.input((2, 6)).reshape(4, 3).shape
        ((12,), (4, 3))
    """
    shape = _one_sequence("reshape", shape, "shape", kwargs)
    return make("reshape", x, shape=shape, name=name)


def transpose(x, *axes, name=None, **kwargs) -> Tensor:
    """Permute axes as NumPy's ``transpose`` (reverse them when ``axes`` is None).

    ``axes`` is one tuple (``af.transpose(x, (0, 2, 1))``), separate ints
    (``x.transpose(1, 0)``) or ``axes=``; it names every axis (PyTorch's two-axis swap
    ``x.transpose(0, 1)`` of a rank-3 tensor is ``x.transpose(1, 0, 2)`` here). ``perm=``
    is a deprecated alias of ``axes=``.

    Example:
        >>> import aneforge as af
        >>> af.transpose(af.input((2, 3, 4)), (0, 2, 1)).shape
        (2, 4, 3)
        >>> af.input((2, 3)).transpose(1, 0).shape
        (3, 2)
    """
    axes = _one_sequence("transpose", axes, "axes", kwargs, old="perm")
    return make("transpose", x, perm=axes, name=name)


def concat(tensors, axis=0, *, name=None) -> Tensor:
    """Join tensors along ``axis``.

    Example:
        >>> import aneforge as af
        >>> af.concat([af.input((2, 3)), af.input((2, 5))], axis=1).shape
        (2, 8)
    """
    if not isinstance(tensors, (list, tuple)):
        raise ShapeError(
            f"concat: tensors must be a list or tuple of tensors, got {describe(tensors)}; "
            "e.g. af.concat([a, b], axis=1)"
        )
    return make("concat", *tensors, axis=axis, name=name)


def slice(x, begins, ends, steps=None, *, name=None) -> Tensor:  # noqa: A001  (the op's name)
    """``x[b0:e0:s0, ...]`` for every axis (Python bounds, positive steps).

    Example:
        >>> import aneforge as af
        >>> af.slice(af.input((4, 6)), (0, 2), (4, 6)).shape
        (4, 4)
    """
    return make("slice", x, begins=begins, ends=ends, steps=steps, name=name)


@_renamed(axes=("axis", _NUMPY))
def squeeze(x, axis=None, *, name=None) -> Tensor:
    """Drop the size-1 axes ``axis`` (an int or a tuple; all of them when None), as NumPy's
    ``squeeze``; ``axes=`` is a deprecated alias of ``axis=``.

    Example:
        >>> import aneforge as af
        >>> af.squeeze(af.input((1, 3, 1))).shape
        (3,)
    """
    if isinstance(axis, int):
        axis = (axis,)
    return make("squeeze", x, axes=axis, name=name)


@_renamed(axes=("axis", _NUMPY))
def expand_dims(x, axis, *, name=None) -> Tensor:
    """Insert size-1 axes at the output positions ``axis`` (an int or a tuple), as NumPy's
    ``expand_dims``; ``axes=`` is a deprecated alias of ``axis=``.

    Example:
        >>> import aneforge as af
        >>> af.expand_dims(af.input((3,)), 0).shape
        (1, 3)
    """
    if isinstance(axis, int):
        axis = (axis,)
    return make("expand_dims", x, axes=axis, name=name)


@_renamed(factor=("upscale_factor", _TORCH))
def pixel_shuffle(x, upscale_factor, *, name=None) -> Tensor:
    """Depth to space: [N, C*r*r, H, W] -> [N, C, H*r, W*r], r = ``upscale_factor``
    (PyTorch's name; ``factor=`` is its deprecated alias).

    Example:
        >>> import aneforge as af
        >>> af.pixel_shuffle(af.input((1, 8, 3, 3)), 2).shape
        (1, 2, 6, 6)
    """
    return make("pixel_shuffle", x, factor=upscale_factor, name=name)


@_renamed(factor=("downscale_factor", _TORCH))
def pixel_unshuffle(x, downscale_factor, *, name=None) -> Tensor:
    """Space to depth: [N, C, H*r, W*r] -> [N, C*r*r, H, W], r = ``downscale_factor``
    (PyTorch's name; ``factor=`` is its deprecated alias).

    Example:
        >>> import aneforge as af
        >>> af.pixel_unshuffle(af.input((1, 2, 6, 6)), 2).shape
        (1, 8, 3, 3)
    """
    return make("pixel_unshuffle", x, factor=downscale_factor, name=name)


def cast(x, dtype="float16", *, name=None) -> Tensor:
    """Cast to fp16, the only dataplane type (other dtypes raise).

    On an fp16 tensor it is the identity. On an integer input (``af.input(shape,
    dtype="int16")``, an attention mask) it is the conversion ``int_to_fp16``, rounded to
    nearest even: exact for ``|v| <= 2048``, 11 significant bits beyond, inf from 65520.

    Example:
        >>> import aneforge as af
        >>> af.cast(af.input((2,)), "float16").shape
        (2,)
        >>> af.cast(af.input((1, 8), dtype="int16")).op
        'int_to_fp16'
    """
    if isinstance(x, Tensor) and x.dtype != "float16":
        get_op("cast").normalize_attrs({"dtype": dtype})  # the same check of ``dtype``
        return int_to_fp16(x, name=name)
    return make("cast", x, dtype=dtype, name=name)


def int_to_fp16(x, *, name=None) -> Tensor:
    """An integer input (``af.input(shape, dtype="int16")``...) as fp16, each value
    rounded to nearest even: exact for ``|v| <= 2048``, 11 significant bits beyond
    (2049 becomes 2048), inf from 65520. ``af.cast`` of an integer input builds it.

    Example:
        >>> import aneforge as af
        >>> af.int_to_fp16(af.input((1, 8), dtype="uint8")).shape
        (1, 8)
    """
    return make("int_to_fp16", x, name=name)


def embedding(table, ids, *, name=None) -> Tensor:
    """The rows of ``table`` (axis 0) at integer ``ids``: shape ``ids.shape +
    table.shape[1:]``, every row copied exactly (token and position embeddings).

    ``table`` is an fp16 tensor or an array (it becomes a weight). ``ids`` is an integer
    input (``af.input(shape, dtype="uint16")``), whose values arrive at run time: an id
    outside ``[0, rows)`` is then an :class:`~aneforge.errors.InputError` naming the input
    and the id. Constant ``ids`` (an integer array or list) give the same rows by
    :func:`gather`, reshaped.

    Example:
        >>> import numpy as np, aneforge as af
        >>> ids = af.input((1, 8), name="input_ids", dtype="uint16")
        >>> af.embedding(np.zeros((100, 16)), ids).shape
        (1, 8, 16)
        >>> af.embedding(np.zeros((100, 16)), [[1, 2], [3, 4]]).shape
        (2, 2, 16)
    """
    if isinstance(ids, Tensor):
        return make("embedding", table, ids, name=name)
    arr = np.asarray(ids)
    if arr.dtype.kind not in "iu" or arr.size == 0:
        raise AttributeValueError(
            f"embedding: ids must be an integer input or a non-empty integer array, got "
            f"{describe(ids)}; declare run-time ids with af.input(shape, dtype='uint16')"
        )
    table = as_tensor(table, "embedding table")
    rows = table.shape[0] if table.ndim else 0
    bad = arr[(arr < 0) | (arr >= rows)]
    if bad.size:
        raise ShapeError(
            f"embedding: id {int(bad[0])} is outside the table's {rows} rows [0, {rows})"
        )
    flat = make("gather", table, indices=tuple(int(i) for i in arr.reshape(-1)), axis=0)
    return make("reshape", flat, shape=arr.shape + table.shape[1:], name=name)


def embedding_fp16_ids(table, ids, *, name=None) -> Tensor:
    """The rows of ``table`` (axis 0) at fp16 ``ids`` computed on the engine (whole
    numbers: position ids the importers derive from token ids): shape ``ids.shape +
    table.shape[1:]``, every row copied exactly. When the program runs, an id that is not
    a whole number in ``[0, rows)`` (a fraction, a negative, one past the table, inf,
    NaN) is an :class:`~aneforge.graph.ops.extra.IdValueError`: never rounded or clamped.
    For run-time integer ids use :func:`embedding`.

    Example:
        >>> import numpy as np, aneforge as af
        >>> ids = af.cast(af.input((1, 8), name="tokens", dtype="uint8")) + 1.0
        >>> af.embedding_fp16_ids(np.zeros((300, 16)), ids).shape
        (1, 8, 16)
    """
    return make("embedding_fp16_ids", table, ids, name=name)


from .ops.bridge import BRIDGE_FUNCTIONS  # noqa: E402  (after the fused functions)

globals().update(BRIDGE_FUNCTIONS)

_METHODS = dict(ELEMENTWISE)
_METHODS.update(
    sum=sum,
    mean=mean,
    amax=amax,
    amin=amin,
    max=amax,
    min=amin,
    softmax=softmax,
    cumsum=cumsum,
    layer_norm=layer_norm,
    rms_norm=rms_norm,
    l2_norm=l2_norm,
    reshape=reshape,
    transpose=transpose,
    squeeze=squeeze,
    expand_dims=expand_dims,
    cast=cast,
    matmul=matmul,
    bmm=bmm,
    linear=linear,
    conv=conv,
    conv_transpose=conv_transpose,
    group_norm=group_norm,
    batch_norm=batch_norm,
    max_pool=max_pool,
    avg_pool=avg_pool,
    upsample=upsample,
    pixel_shuffle=pixel_shuffle,
    pixel_unshuffle=pixel_unshuffle,
    slice=slice,
    select=lambda self, a, b, *, name=None: select(self, a, b, name=name),
)
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.__getitem__ = getitem  # x[key]: ints, slices and one Ellipsis (ops.shape.getitem)
Tensor.T = property(lambda self: transpose(self), doc="Axes reversed.")

__all__ = sorted(
    set(ELEMENTWISE)
    | set(BRIDGE_FUNCTIONS)
    | {
        "select",
        "matmul",
        "bmm",
        "linear",
        "conv",
        "conv_transpose",
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "softmax",
        "cumsum",
        "layer_norm",
        "rms_norm",
        "group_norm",
        "batch_norm",
        "l2_norm",
        "max_pool",
        "avg_pool",
        "upsample",
        "reshape",
        "transpose",
        "concat",
        "slice",
        "squeeze",
        "expand_dims",
        "pixel_shuffle",
        "pixel_unshuffle",
        "cast",
        "embedding",
        "embedding_fp16_ids",
        "int_to_fp16",
    }
)


def gather(x, indices, axis=0, *, name=None) -> Tensor:
    """The slices of ``x`` at the constant ``indices`` along ``axis``, in order.

    Indices may repeat and run in any order (negative ones count from the end); the
    result's ``axis`` has ``len(indices)`` entries. A pure movement op (exact).

    Example:
        >>> import aneforge as af
        >>> af.gather(af.input((4, 3)), [3, 3, 0]).shape
        (3, 3)
    """
    nested = isinstance(indices, (list, tuple)) and any(
        isinstance(i, (list, tuple, np.ndarray)) for i in indices
    )
    if nested or (isinstance(indices, np.ndarray) and indices.ndim > 1):
        raise AttributeValueError(
            f"gather: indices must be a flat list of integers, got {describe(indices)}; "
            "flatten them and reshape the result instead"
        )
    return make("gather", x, indices=indices, axis=axis, name=name)


Tensor.gather = gather
__all__ = sorted([*__all__, "gather"])
