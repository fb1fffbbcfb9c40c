"""Property tests on random graphs built from the op registry.

A hypothesis strategy grows a small graph: 1-3 inputs of random small shapes, then 1-12
ops drawn from the registry's fused ops, each applied to a tensor already in the graph
with operands chosen to fit its shape most of the time (and deliberately not, now and
then, so the shape rules get exercised). Properties:

(a) building and compiling raise nothing but AneforgeError subclasses;
(b) the fast path (device "emulator") equals the reference interpreter bit for bit;
(c) on graphs of well-conditioned ops the emulator stays within a running error bound,
    derived op by op from the fp16 contract, of the float64 reference;
(d) compiling and running are deterministic.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import aneforge as af
from aneforge.emulator import gemm as gemm_backends
from aneforge.graph.registry import all_ops, get_op
from aneforge.graph.tensor import INTEGER_DTYPES
from conftest import FP16_TINY, FP16_UNIT_ROUNDOFF, FP32_UNIT_ROUNDOFF, same_bits

PROFILE = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

U = FP16_UNIT_ROUNDOFF
U32 = FP32_UNIT_ROUNDOFF
TINY = FP16_TINY
CLEAN_MAX_SIZE = 625  # keeps every narrow sum's K * u well below 1 (625 * 2**-11 < 0.31)
ANY_MAX_SIZE = 4096
PEAK = 2.0**15  # magnitudes the clean-graph bound assumes no partial result reaches

# Lipschitz constants (sup |f'| over the reals) of the unary ops allowed in clean graphs;
# test_lipschitz_table_bounds_the_slopes checks them against the registry's kernels.
LIPSCHITZ = {
    "neg": 1.0,
    "relu": 1.0,
    "abs": 1.0,
    "relu6": 1.0,
    "clip": 1.0,
    "tanh": 1.0,
    "sigmoid": 0.25,
    "sin": 1.0,
    "cos": 1.0,
    "softplus": 1.0,
    "erf": 2.0 / math.sqrt(math.pi),
    "gelu": 1.13,  # max of Phi(x) + x phi(x), at x = sqrt(2): 1.12890
    "silu": 1.1,  # max of s(x) (1 + x (1 - s(x))): 1.09984
}
UNARY_ATTR_LIPSCHITZ = ("elu", "leaky_relu")  # Lipschitz max(1, |alpha|)
CLEAN_BINARY = ("add", "sub", "mul", "maximum", "minimum")
NOT_CLEAN = {"exp", "pow", "div", "log", "inverse", "rsqrt", "sqrt"}  # brief's exclusions


# ---- helpers -----------------------------------------------------------------------------


def mx(a) -> float:
    """Max magnitude of an array (0 for an empty one)."""
    a = np.asarray(a, dtype=np.float64)
    return float(np.max(np.abs(a))) if a.size else 0.0


def gamma(k: int, u: float = U) -> float:
    """Higham's gamma_k = k u / (1 - k u): bound of k chained roundings, relative."""
    return k * u / (1.0 - k * u) if k * u < 0.5 else math.inf


def finish(m_out: float, err: float) -> float:
    """Error after one final rounding of a value within ``err`` of an exact ``m_out``."""
    return err + U * (m_out + err) + TINY


def guard(peak: float, err: float) -> float:
    """``err``, or inf when an intermediate may reach the overflow zone (bound void)."""
    return err if peak < PEAK else math.inf


def as_list(out):
    return list(out) if isinstance(out, tuple) else [out]


# ---- the graph strategy ------------------------------------------------------------------

Rule = Callable[[list, list, np.ndarray], float]


@dataclass
class Step:
    """One op added to the graph and, in clean graphs, how its error bound propagates.

    ``rule(errors, values, out)`` gets the error bounds and the exact values of ``srcs``
    (graph tensors only; weights are constants the rule closes over) and the exact value
    of the op's output, and returns a bound on max |emulated - exact| of the output.
    """

    name: str
    tensor: af.Tensor
    srcs: tuple
    rule: Rule | None


@dataclass
class Graph:
    inputs: list
    feeds: list
    steps: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    rejected: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)


@dataclass
class Ctx:
    draw: Callable
    rng: np.random.Generator
    clean: bool
    pool: list
    graph: Graph | None = None  # where builders add integer inputs (ids, masks)

    def coin(self, one_in: int) -> bool:
        """True with probability about 1/one_in (always False in clean graphs)."""
        return not self.clean and self.draw(st.integers(0, one_in - 1)) == 0

    def values(self, shape, lo=-2.0, hi=2.0):
        """Weight values: uniform in [lo, hi] (clean) or wide-range with specials."""
        if self.clean:
            return self.rng.uniform(lo, hi, shape)
        if self.coin(25):
            return np.full(shape, 1e6)  # beyond fp16: a WeightRangeError to expect
        return wild_values(self.rng, shape)


def wild_values(rng, shape):
    """Normal values at a random scale, sometimes with inf, nan, zeros and subnormals."""
    scale = rng.choice([1.0, 1.0, 8.0, 300.0, 2.0**-12])
    out = np.asarray(rng.standard_normal(shape) * scale, dtype=np.float64)
    if out.size and rng.random() < 0.3:
        specials = [np.inf, -np.inf, np.nan, 0.0, -0.0, 6e-8, 65504.0, -3e-5]
        for i in rng.choice(out.size, size=min(out.size, 3), replace=False):
            out.flat[i] = specials[rng.integers(len(specials))]
    return out


def small_shape(draw, max_rank=4, dims=(1, 2, 3, 4, 5)):
    rank = draw(st.integers(1, max_rank))
    return tuple(draw(st.sampled_from(dims)) for _ in range(rank))


def sub_shape(ctx, shape):
    """A shape that broadcasts into ``shape`` without growing it (or, rarely, any shape)."""
    if ctx.coin(8):
        return small_shape(ctx.draw, 3)
    k = ctx.draw(st.integers(0, len(shape)))
    tail = shape[len(shape) - k :]
    return tuple(1 if ctx.draw(st.booleans()) else d for d in tail)


def broadcasts_into(shape, target) -> bool:
    try:
        return tuple(np.broadcast_shapes(shape, target)) == tuple(target)
    except ValueError:
        return False


def weight_of(y, index):
    """The fp16 value of source ``index`` of ``y`` (a weight), as float64."""
    return np.asarray(y.srcs[index].value, dtype=np.float64)


# ---- builders: each returns a Step or raises (AneforgeError is an allowed outcome) -------


def build_unary(ctx, x, name):
    attrs = {}
    if name == "gelu":
        attrs["approximate"] = ctx.draw(st.sampled_from(["none", "tanh"]))
    elif name == "elu":
        attrs["alpha"] = ctx.draw(st.sampled_from([0.5, 1.0, 1.7]))
    elif name == "leaky_relu":
        attrs["alpha"] = ctx.draw(st.sampled_from([0.01, 0.3, -0.5, 1.5]))
    elif name == "clip":
        attrs["lo"] = ctx.draw(st.sampled_from([None, -1.0, 0.25]))
        attrs["hi"] = ctx.draw(st.sampled_from([None, 0.5, 1.5]))
    if ctx.coin(10):
        attrs = {"bogus": ctx.draw(st.sampled_from([1, "x", float("nan")]))}
    y = getattr(af, name)(x, **attrs)
    lip = LIPSCHITZ.get(name)
    if name in UNARY_ATTR_LIPSCHITZ:
        lip = max(1.0, abs(attrs["alpha"]))
    if name == "square":

        def rule(e, v, out):
            prop = (2.0 * mx(v[0]) + e[0]) * e[0]  # |x'^2 - x^2| <= (2|x| + e) e
            return finish(mx(out), prop)

    elif lip is not None:

        def rule(e, v, out):
            return finish(mx(out), lip * e[0])

    else:
        rule = None
    return Step(name, y, (x,), rule)


def other_operand(ctx, x, name):
    """(operand, is_tensor): a pool tensor, an array weight or a Python scalar."""
    kind = ctx.draw(st.sampled_from(["weight", "scalar", "tensor"]))
    if kind == "tensor":
        pool = [t for t in ctx.pool if not ctx.clean or broadcasts_into(t.shape, x.shape)]
        if pool:
            return ctx.draw(st.sampled_from(pool)), True
        kind = "weight"
    lo, hi = (-1.0, 1.0) if name == "mul" else (-2.0, 2.0)
    if kind == "scalar":
        with np.errstate(over="ignore"):
            return float(np.float16(ctx.values((), lo, hi))), False
    return ctx.values(sub_shape(ctx, x.shape), lo, hi), False


def build_binary(ctx, x, name):
    other, is_tensor = other_operand(ctx, x, name)
    swap = ctx.draw(st.booleans())
    y = getattr(af, name)(other, x) if swap else getattr(af, name)(x, other)
    if name not in CLEAN_BINARY:
        return Step(name, y, (x,), None)
    w = None if is_tensor else weight_of(y, 0 if swap else 1)
    srcs = (x, other) if is_tensor else (x,)

    def rule(e, v, out):
        ea, eb = e[0], (e[1] if is_tensor else 0.0)
        if name in ("maximum", "minimum"):
            return max(ea, eb)  # exact op, 1-Lipschitz in each operand jointly
        if name == "mul":
            ma = mx(v[0])
            mb = mx(v[1]) if is_tensor else mx(w)
            return finish(mx(out), mb * ea + ma * eb + ea * eb)
        return finish(mx(out), ea + eb)

    return Step(name, y, srcs, rule)


def build_compare(ctx, x, name):
    other, _ = other_operand(ctx, x, name)
    return Step(name, getattr(af, name)(x, other), (x,), None)


def build_select(ctx, x):
    a, _ = other_operand(ctx, x, "select")
    b, _ = other_operand(ctx, x, "select")
    return Step("select", af.select(x, a, b), (x,), None)


def contraction_rule(k: int, c_weight: float, bias=None):
    """Error of x @ W (or a conv) with K terms per output and max column |W|-sum C.

    Propagated: C e. Rounding each product: u |a' w| (+ tiny), summed: u C (M + e) + K
    tiny/2. The float32 sum of K rounded products: gamma32_K (1 + u) C (M + e). Final
    fp16 rounding via finish(); a bias is one more fp16 add, rounded.
    """

    def rule(e, v, out):
        a_abs = c_weight * (mx(v[0]) + e[0])
        before = (
            c_weight * e[0]
            + U * a_abs
            + k * TINY / 2
            + gamma(k, U32) * ((1 + U) * a_abs + k * TINY / 2)
        )
        m_mm = mx(out) + (mx(bias) if bias is not None else 0.0)
        err = finish(m_mm, before)
        if bias is not None:
            err = finish(mx(out), err)
        return guard(a_abs, err)

    return rule


def build_matmul(ctx, x):
    k = x.shape[-1] if x.ndim else 1
    if ctx.coin(8):
        k = ctx.draw(st.integers(1, 6))
    n = ctx.draw(st.sampled_from([1, 2, 3, 5] if ctx.clean else [1, 2, 3, 5, 32, 37]))
    form = ctx.draw(st.sampled_from(["2d", "1d", "batched", "left"]))
    if form == "left":  # weight @ x: a bmm with a weight operand
        if ctx.clean:
            form = "2d"
        else:
            m = x.shape[-2] if x.ndim >= 2 else k
            w = ctx.values((n, m))
            return Step("bmm", af.matmul(w, x), (x,), None)
    shape = {"2d": (k, n), "1d": (k,), "batched": (ctx.draw(st.integers(1, 2)), k, n)}[form]
    w = ctx.values(shape, -1.0 / k, 1.0 / k)
    y = x @ w
    wv = weight_of(y, 1)
    wv = wv[..., None] if wv.ndim == 1 else wv
    c_weight = float(np.max(np.sum(np.abs(wv), axis=-2)))
    return Step("matmul", y, (x,), contraction_rule(k, c_weight))


def build_bmm(ctx, x):
    k = x.shape[-1] if x.ndim else 1
    fits = [t for t in ctx.pool if t.ndim and t.shape[-2 if t.ndim > 1 else -1] == k]
    mode = ctx.draw(st.sampled_from(["pool", "self"]))
    if mode == "self" and x.ndim >= 2:
        perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
        other = af.transpose(x, perm)  # x @ x^T: the same values on both sides
    elif fits and not ctx.coin(6):
        other = ctx.draw(st.sampled_from(fits))
    else:
        other = ctx.draw(st.sampled_from(ctx.pool))
    y = af.bmm(x, other)
    same = other is x or (other.op == "transpose" and other.srcs[0] is x)
    srcs = (x,) if same else (x, other)

    def rule(e, v, out):
        ea, ma = e[0], mx(v[0])
        eb, mb = (ea, ma) if same else (e[1], mx(v[1]))
        a_abs = k * (ma + ea) * (mb + eb)
        before = (
            k * (ea * mb + ma * eb + ea * eb)
            + U * a_abs
            + k * TINY / 2
            + gamma(k, U32) * ((1 + U) * a_abs + k * TINY / 2)
        )
        return guard(a_abs, finish(mx(out), before))

    return Step("bmm", y, srcs, rule)


def build_linear(ctx, x):
    k = x.shape[-1] if x.ndim else 1
    if ctx.coin(8):
        k += 1
    n = ctx.draw(st.integers(1, 5))
    w = ctx.values((n, k), -1.0 / k, 1.0 / k)
    bias = ctx.values((n,)) if ctx.draw(st.booleans()) else None
    y = af.linear(x, w, bias)
    wv = weight_of(y, 1)
    bv = weight_of(y, 2) if bias is not None else None
    c_weight = float(np.max(np.sum(np.abs(wv), axis=1)))
    return Step("linear", y, (x,), contraction_rule(k, c_weight, bv))


def build_conv(ctx, x, transpose=False):
    cin = x.shape[1] if x.ndim >= 2 else 1
    groups = ctx.draw(st.sampled_from([g for g in (1, 2, 3) if cin % g == 0]))
    if ctx.coin(6):
        groups = ctx.draw(st.integers(1, 4))
    nd = max(x.ndim - 2, 1)
    spatial = x.shape[2:] if x.ndim >= 3 else (1,) * nd
    per_group = ctx.draw(st.integers(1, 2))
    kw = dict(
        stride=ctx.draw(st.integers(1, 2)),
        padding=ctx.draw(st.integers(0, 1)),
        dilation=ctx.draw(st.integers(1, 2)),
        groups=groups,
    )
    # largest kernel that fits: dilation * (k - 1) <= size + 2 pad - 1
    fit = [max(1, min(3, (n + 2 * kw["padding"] - 1) // kw["dilation"] + 1)) for n in spatial]
    kern = tuple(ctx.draw(st.integers(1, 3 if ctx.coin(4) else f)) for f in fit[:nd])
    if ctx.coin(6):
        kw["padding"] = ctx.draw(st.sampled_from([-1, (1, 2, 3), (0, 1, 1, 0)]))
    cg = max(cin // groups, 1)
    k_terms = cg * int(np.prod(kern))
    if transpose:
        shape = (cin, per_group) + kern
        if kw["stride"] > 1 and ctx.draw(st.booleans()):
            kw["output_padding"] = 1
    else:
        shape = (per_group * groups, cg) + kern
    w = ctx.values(shape, -1.0 / k_terms, 1.0 / k_terms)
    bias_n = per_group * groups
    bias = ctx.values((bias_n,)) if ctx.draw(st.booleans()) else None
    fn = af.conv_transpose if transpose else af.conv
    y = fn(x, w, bias, **kw)
    wv = np.abs(weight_of(y, 1))
    bv = weight_of(y, 2) if bias is not None else None
    if transpose:  # every output channel sums over at most all (ci, taps) of its column
        c_weight = float(np.max(np.sum(wv, axis=(0,) + tuple(range(2, wv.ndim)))))
        k_terms = wv.shape[0] * int(np.prod(kern))
    else:
        c_weight = float(np.max(np.sum(wv.reshape(wv.shape[0], -1), axis=1)))
    name = "conv_transpose" if transpose else "conv"
    return Step(name, y, (x,), contraction_rule(k_terms, c_weight, bv))


def draw_axes(ctx, x):
    if ctx.draw(st.booleans()) or x.ndim == 0:
        return None if ctx.draw(st.booleans()) else ()
    axes = ctx.draw(st.sets(st.integers(-x.ndim, x.ndim - 1), min_size=1, max_size=x.ndim))
    axes = sorted(axes)
    if ctx.coin(6):
        axes = axes + [x.ndim]  # out of range
    return tuple(axes)


def build_reduce(ctx, x, name):
    axes = draw_axes(ctx, x)
    keepdims = ctx.draw(st.booleans())
    y = getattr(af, name)(x, axis=axes, keepdims=keepdims)
    norm = range(x.ndim) if axes is None else {a % x.ndim for a in axes}
    k = int(np.prod([x.shape[a] for a in norm], dtype=np.int64))

    def rule(e, v, out):
        if name in ("amax", "amin"):
            return e[0]  # exact, 1-Lipschitz
        abs_sum = k * (mx(v[0]) + e[0])
        total = k * e[0] + gamma(k) * abs_sum + k * TINY  # narrow fp16 accumulator
        if name == "sum":
            return guard(abs_sum, finish(mx(out), total))
        return guard(abs_sum, finish(mx(out), total / k))

    return Step(name, y, (x,), rule)


def build_softmax(ctx, x):
    axis = ctx.draw(st.integers(-x.ndim, x.ndim - 1)) if x.ndim else -1
    if ctx.coin(8):
        axis = x.ndim
    y = af.softmax(x, axis=axis)
    k = x.shape[axis] if x.ndim else 1

    def rule(e, v, out):
        # d = fp16(x - max): both terms shift by <= e; |d| <= 2 (M + e)
        e_d = 2 * e[0] + U * 2 * (mx(v[0]) + e[0]) + TINY
        e_e = e_d + U + TINY  # exp is 1-Lipschitz on d <= 0 and e <= 1
        e_s = k * e_e + gamma(k) * k * (1 + e_e) + k * TINY  # narrow sum, s >= 1
        return e_e + e_s + U + TINY  # |e'/s' - e/s| <= |e'-e| + |s'-s| for s, s' >= 1

    return Step("softmax", y, (x,), rule)


def build_cumsum(ctx, x):
    y = af.cumsum(x, axis=-1 if not ctx.coin(8) else 0)
    k = x.shape[-1] if x.ndim else 1

    def rule(e, v, out):
        abs_sum = k * (mx(v[0]) + e[0])
        return guard(abs_sum, finish(mx(out), k * e[0] + gamma(k, U32) * abs_sum))

    return Step("cumsum", y, (x,), rule)


def build_pool(ctx, x, name):
    nd = max(x.ndim - 2, 1)
    spatial = x.shape[2:] if x.ndim >= 3 else (1,) * nd
    pad = ctx.draw(st.integers(0, 1))
    # pad < kernel <= size + 2 pad; fall back to kernel 1 without padding
    kern = [ctx.draw(st.integers(pad + 1, max(pad + 1, min(3, n + 2 * pad)))) for n in spatial]
    if any(k > n + 2 * pad for k, n in zip(kern, spatial)) and not ctx.coin(4):
        kern, pad = [1] * len(spatial), 0
    kw = dict(
        kernel_size=tuple(kern[:nd]), stride=ctx.draw(st.sampled_from([None, 1, 2])), padding=pad
    )
    if name == "avg_pool":
        kw["count_include_pad"] = ctx.draw(st.booleans())
    y = getattr(af, name)(x, **kw)
    kw_size = int(np.prod(kw["kernel_size"]))

    def rule(e, v, out):
        if name == "max_pool":
            return e[0]
        # window sum (narrow, pads add exact zeros) then / count >= 1, rounded once
        avg = e[0] + gamma(kw_size) * (mx(v[0]) + e[0]) + kw_size * TINY
        return guard(kw_size * (mx(v[0]) + e[0]), finish(mx(out), avg))

    return Step(name, y, (x,), rule)


def build_upsample(ctx, x):
    mode = ctx.draw(st.sampled_from(["nearest", "bilinear"]))
    y = af.upsample(
        x, ctx.draw(st.integers(1, 2)), mode=mode, align_corners=ctx.draw(st.booleans())
    )

    def rule(e, v, out):  # a convex combination, rounded once (nearest: a copy)
        return e[0] if mode == "nearest" else finish(mx(out), e[0])

    return Step("upsample", y, (x,), rule)


def build_norm(ctx, x, name):
    affine = ctx.draw(st.booleans())
    if name in ("layer_norm", "rms_norm", "l2_norm"):
        axis = ctx.draw(st.integers(-x.ndim, x.ndim - 1)) if x.ndim else -1
        if ctx.coin(8):
            axis = x.ndim
        pshape = x.shape[axis:] if -x.ndim <= axis < x.ndim else (1,)
        if name == "layer_norm":
            w = ctx.values(pshape) if affine else None
            b = ctx.values(pshape) if affine and ctx.draw(st.booleans()) else None
            y = af.layer_norm(x, w, b, axis=axis)
        elif name == "rms_norm":
            y = af.rms_norm(x, ctx.values(pshape) if affine else None, axis=axis)
        else:
            y = af.l2_norm(x, axis=axis)
    elif name == "group_norm":
        c = x.shape[1] if x.ndim >= 2 else 1
        groups = ctx.draw(st.sampled_from([1, 2, 3, 4]))
        w = ctx.values((c,)) if affine else None
        y = af.group_norm(x, groups, w, ctx.values((c,)) if affine else None)
    else:
        c = x.shape[1] if x.ndim >= 2 else 1
        var = np.abs(ctx.values((c,))) + 0.5
        params = [ctx.values((c,)), var]
        if affine:
            params += [ctx.values((c,)), ctx.values((c,))]
        y = af.batch_norm(x, *params)
    return Step(name, y, (x,), None)


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def build_reshape(ctx, x):
    n = x.size
    dims, rest = [], n
    for _ in range(ctx.draw(st.integers(0, 2))):
        d = ctx.draw(st.sampled_from(divisors(rest)))
        dims.append(d)
        rest //= d
    dims.append(rest)
    if ctx.draw(st.booleans()):
        dims[ctx.draw(st.integers(0, len(dims) - 1))] = -1
    if ctx.coin(6):
        dims = list(small_shape(ctx.draw))
    return Step("reshape", af.reshape(x, dims), (x,), lambda e, v, out: e[0])


def build_transpose(ctx, x):
    perm = ctx.draw(st.none() | st.permutations(list(range(x.ndim))))
    if ctx.coin(8):
        perm = [0] * max(x.ndim, 1)
    y = af.transpose(x, perm) if ctx.draw(st.booleans()) or perm is not None else x.T
    return Step("transpose", y, (x,), lambda e, v, out: e[0])


def build_slice(ctx, x):
    if ctx.draw(st.booleans()) and x.ndim:
        d = x.shape[0]
        key = ctx.draw(
            st.sampled_from([slice(None), slice(1, None), slice(None, None, 2), 0, -1])
            | st.just((Ellipsis, slice(0, max(x.shape[-1] - 1, 1))))
        )
        if ctx.coin(8):
            key = d  # out of range
        return Step("slice", x[key], (x,), lambda e, v, out: e[0])
    begins = [ctx.draw(st.integers(-d - 1, d)) for d in x.shape]
    ends = [ctx.draw(st.integers(-d, d + 1)) for d in x.shape]
    steps = [ctx.draw(st.integers(1, 2)) for _ in x.shape]
    if ctx.coin(8):
        steps = [0] * (len(steps) + ctx.draw(st.integers(0, 1)))
    y = af.slice(x, begins, ends, steps)
    return Step("slice", y, (x,), lambda e, v, out: e[0])


def build_squeeze(ctx, x):
    ones = tuple(i for i, d in enumerate(x.shape) if d == 1)
    axes = ctx.draw(st.sampled_from([None, ones] + ([0] if ctx.coin(3) else [])))
    return Step("squeeze", af.squeeze(x, axes), (x,), lambda e, v, out: e[0])


def build_expand_dims(ctx, x):
    axis = ctx.draw(st.integers(-x.ndim - 1, x.ndim))
    if ctx.coin(8):
        axis = x.ndim + 3
    return Step("expand_dims", af.expand_dims(x, axis), (x,), lambda e, v, out: e[0])


def build_shuffle(ctx, x, name):
    y = getattr(af, name)(x, ctx.draw(st.integers(1, 2)))
    return Step(name, y, (x,), lambda e, v, out: e[0])


def build_cast(ctx, x):
    dtype = "float16" if not ctx.coin(4) else "float32"
    return Step("cast", af.cast(x, dtype), (x,), lambda e, v, out: e[0])


def build_concat(ctx, x):
    axis = ctx.draw(st.integers(-x.ndim, x.ndim - 1)) if x.ndim else 0
    others = [t for t in ctx.pool if t.shape == x.shape or ctx.coin(3)]
    other = ctx.draw(st.sampled_from(others)) if others else x
    y = af.concat([x, other], axis=axis)
    srcs = (x,) if other is x else (x, other)
    return Step("concat", y, srcs, lambda e, v, out: max(e))


def build_gather(ctx, x):
    axis = ctx.draw(st.integers(-x.ndim, x.ndim - 1))
    d = x.shape[axis]
    n = ctx.draw(st.integers(1, 2 * d))
    indices = [ctx.draw(st.integers(-d, d - 1)) for _ in range(n)]
    if ctx.coin(8):
        indices = [d]  # out of range
    y = af.gather(x, indices, axis=axis)
    return Step("gather", y, (x,), lambda e, v, out: e[0])


def integer_input(ctx, shape, lo: int, hi: int, dtype: str):
    """A new integer graph input (ids, a mask) of range [lo, hi], fed whole numbers in it."""
    g = ctx.graph
    t = af.input(shape, name=f"i{len(g.inputs)}", dtype=dtype, range=(lo, hi))
    g.inputs.append(t)
    g.feeds.append(ctx.rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype))
    return t


def build_embedding(ctx, x):
    rows = x.shape[0] if x.ndim else 1
    ids = integer_input(ctx, small_shape(ctx.draw, 2, (1, 2, 3, 4)), 0, rows - 1, "uint16")
    return Step("embedding", af.embedding(x, ids), (x,), lambda e, v, out: e[0])


def build_embedding_fp16_ids(ctx, x):
    """Rows of x at fp16 whole-number ids computed on the engine (an integer input in
    [0, rows) converted exactly: the tables here have far fewer than 2048 rows)."""
    rows = x.shape[0] if x.ndim else 1
    ids = integer_input(ctx, small_shape(ctx.draw, 2, (1, 2, 3, 4)), 0, rows - 1, "uint16")
    y = af.make("embedding_fp16_ids", x, af.cast(ids))
    return Step("embedding_fp16_ids", y, (x,), lambda e, v, out: e[0])


def build_int_to_fp16(ctx, x):
    """x only lends its shape: the source is a new integer input (exact to |v| <= 2048
    in clean graphs; beyond, one fp16 rounding, a relative 2**-11)."""
    dtype = "int16" if ctx.clean or ctx.coin(2) else ctx.draw(st.sampled_from(["uint8", "uint16"]))
    lo, hi = (-2048, 2048) if ctx.clean else INTEGER_DTYPES[dtype]
    ids = integer_input(ctx, x.shape or (1,), max(lo, INTEGER_DTYPES[dtype][0]), hi, dtype)
    y = af.cast(ids)
    return Step("int_to_fp16", y, (ids,), lambda e, v, out: mx(v[0]) * 2.0**-11)


SPECIAL_BUILDERS = {
    "matmul": build_matmul,
    "bmm": build_bmm,
    "linear": build_linear,
    "conv": build_conv,
    "conv_transpose": lambda ctx, x: build_conv(ctx, x, transpose=True),
    "sum": lambda ctx, x: build_reduce(ctx, x, "sum"),
    "mean": lambda ctx, x: build_reduce(ctx, x, "mean"),
    "amax": lambda ctx, x: build_reduce(ctx, x, "amax"),
    "amin": lambda ctx, x: build_reduce(ctx, x, "amin"),
    "softmax": build_softmax,
    "cumsum": build_cumsum,
    "max_pool": lambda ctx, x: build_pool(ctx, x, "max_pool"),
    "avg_pool": lambda ctx, x: build_pool(ctx, x, "avg_pool"),
    "upsample": build_upsample,
    "layer_norm": lambda ctx, x: build_norm(ctx, x, "layer_norm"),
    "rms_norm": lambda ctx, x: build_norm(ctx, x, "rms_norm"),
    "l2_norm": lambda ctx, x: build_norm(ctx, x, "l2_norm"),
    "group_norm": lambda ctx, x: build_norm(ctx, x, "group_norm"),
    "batch_norm": lambda ctx, x: build_norm(ctx, x, "batch_norm"),
    "reshape": build_reshape,
    "transpose": build_transpose,
    "slice": build_slice,
    "squeeze": build_squeeze,
    "expand_dims": build_expand_dims,
    "pixel_shuffle": lambda ctx, x: build_shuffle(ctx, x, "pixel_shuffle"),
    "pixel_unshuffle": lambda ctx, x: build_shuffle(ctx, x, "pixel_unshuffle"),
    "cast": build_cast,
    "concat": build_concat,
    "select": build_select,
    "gather": build_gather,
    "embedding": build_embedding,
    "embedding_fp16_ids": build_embedding_fp16_ids,
    "int_to_fp16": build_int_to_fp16,
}


RANKS = {
    "conv": (3, 4),
    "conv_transpose": (3, 4),
    "max_pool": (3, 4),
    "avg_pool": (3, 4),
    "upsample": (3, 4),
    "pixel_shuffle": (4,),
    "pixel_unshuffle": (4,),
    "group_norm": (2, 3, 4, 5),
    "batch_norm": (2, 3, 4, 5),
}


def fits(name, t) -> bool:
    """Whether tensor ``t`` has a rank op ``name`` accepts (rank >= 1 for the rest)."""
    return t.ndim in RANKS.get(name, (1, 2, 3, 4, 5))


def builder_for(name):
    """The builder of a registered fused op, from its flags or the table above."""
    if name in SPECIAL_BUILDERS:
        return SPECIAL_BUILDERS[name]
    flags = get_op(name).flags
    if "unary" in flags:
        return lambda ctx, x: build_unary(ctx, x, name)
    if "binary" in flags:
        if name in CLEAN_BINARY or name in NOT_CLEAN:
            return lambda ctx, x: build_binary(ctx, x, name)
        return lambda ctx, x: build_compare(ctx, x, name)
    return None


FUSED_OPS = sorted(n for n, op in all_ops().items() if op.kind == "fused" and builder_for(n))
CLEAN_OPS = [
    n
    for n in FUSED_OPS
    if n not in NOT_CLEAN
    and (
        n in LIPSCHITZ
        or n in UNARY_ATTR_LIPSCHITZ
        or n in CLEAN_BINARY
        or n == "square"
        or (n in SPECIAL_BUILDERS and n not in ("select",) and "norm" not in n)
    )
]


@st.composite
def graphs(draw, clean=False, max_ops=12):
    """A random graph; ``clean`` restricts it to well-conditioned ops and values."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_inputs = draw(st.integers(1, 3))
    inputs, feeds = [], []
    for i in range(n_inputs):
        dims = (1, 2, 3, 4, 5) if clean else (1, 2, 3, 4, 5, 5, 8, 33)
        shape = small_shape(draw, 4, dims)
        while int(np.prod(shape)) > (CLEAN_MAX_SIZE if clean else ANY_MAX_SIZE):
            shape = shape[1:]
        inputs.append(af.input(shape, name=f"x{i}"))
        values = rng.uniform(-2.0, 2.0, shape) if clean else wild_values(rng, shape)
        feeds.append(values.astype(np.float16))
    g = Graph(inputs=inputs, feeds=feeds)
    ctx = Ctx(draw=draw, rng=rng, clean=clean, pool=list(inputs), graph=g)
    names = CLEAN_OPS if clean else FUSED_OPS
    limit = CLEAN_MAX_SIZE if clean else ANY_MAX_SIZE
    for _ in range(draw(st.integers(1, max_ops))):
        name = draw(st.sampled_from(names))
        candidates = [t for t in ctx.pool if fits(name, t)]
        if not candidates or ctx.coin(6):
            candidates = ctx.pool  # sometimes any tensor: its shape rule may refuse it
        x = draw(st.sampled_from(candidates))
        try:
            step = builder_for(name)(ctx, x)
        except af.AneforgeError as err:
            g.rejected.append(f"{name}{x.shape}: {type(err).__name__}")
            continue
        except Exception as err:  # anything else is a bug the property reports
            g.unexpected.append(f"{name} on {x.shape}: {type(err).__name__}: {err}")
            continue
        if step.tensor.size <= limit:
            g.steps.append(step)
            ctx.pool.append(step.tensor)
    last = g.steps[-1].tensor if g.steps else inputs[0]
    extra = draw(st.lists(st.sampled_from(ctx.pool), max_size=2))
    g.outputs = [last] + [t for t in extra if t is not last]
    return g


# ---- (a) only AneforgeError --------------------------------------------------------------


def test_the_strategy_covers_every_fused_op():
    """A new fused op without a builder would silently escape the properties."""
    fused = {n for n, op in all_ops().items() if op.kind == "fused"}
    assert fused == set(FUSED_OPS)
    assert {"add", "matmul", "conv", "sum", "softmax", "gelu"} <= set(CLEAN_OPS)
    assert not NOT_CLEAN & set(CLEAN_OPS)


@given(graphs(), st.sampled_from(["ok", "empty", "bad_opt", "not_tensor"]))
@settings(PROFILE, max_examples=300)
def test_building_and_compiling_raise_only_aneforge_errors(g, corruption):
    assert not g.unexpected, g.unexpected
    outputs, opt = list(g.outputs), 0
    if corruption == "empty":
        outputs = []
    elif corruption == "bad_opt":
        opt = 7
    elif corruption == "not_tensor":
        outputs.append(np.ones(2))
    try:
        prog = af.compile(outputs, opt=opt)
    except af.AneforgeError:
        assert corruption != "ok", "compile refused a valid graph"
        return
    except Exception as err:
        raise AssertionError(f"compile raised {type(err).__name__}: {err}") from err
    assert corruption == "ok", f"compile accepted {corruption}"
    assert prog.op_count == len({id(n) for n in prog.compute_nodes}) == len(prog.compute_nodes)
    position = {id(n): i for i, n in enumerate(prog.nodes)}
    assert len(position) == len(prog.nodes)
    for i, node in enumerate(prog.nodes):
        assert all(position[id(s)] < i for s in node.srcs)


# ---- (b) fast path == reference interpreter ----------------------------------------------


def feeds_for(prog, g):
    """The feeds of the inputs ``prog`` uses (outputs may not need every input)."""
    by_id = {id(t): f for t, f in zip(g.inputs, g.feeds)}
    return [by_id[id(t)] for t in prog.inputs]


def run_both(prog, feeds):
    fast = prog.run(*feeds)  # default device: the emulator's fast path
    ref = prog.run(*feeds, device="reference")
    # a disabled kernel would make fast == reference hold trivially
    assert gemm_backends.FAST_PATH_AVAILABLE, "the compiled gemm kernel was disabled"
    return fast, ref


def test_the_fast_path_runs_the_compiled_kernel():
    """numba is a dependency: the default device must use the compiled matmul kernel."""
    x = af.input((5, 300), name="x")
    prog = af.compile(x @ np.full((300, 40), 0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "fast path unavailable" warns
        got = prog(np.ones((5, 300)))
    assert gemm_backends.FAST_PATH_AVAILABLE
    assert np.all(got == 150.0)


@given(graphs())
@settings(PROFILE, max_examples=250)
def test_fast_path_equals_reference_interpreter(g):
    prog = af.compile(g.outputs)
    fast, ref = run_both(prog, feeds_for(prog, g))
    assert len(fast) == len(ref) == len(g.outputs)
    for i, (a, b, t) in enumerate(zip(fast, ref, g.outputs)):
        assert np.asarray(a).shape == t.shape
        assert same_bits(a, b), f"output {i} ({t.op}) differs between fast and reference"


@st.composite
def contractions(draw):
    """One big-ish contraction (past the kernel's 4 x 32 tiles and 256-deep k-blocks)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["matmul", "bmm", "linear", "conv"]))
    m = draw(st.sampled_from([1, 3, 4, 5, 9, 67]))  # 4-row tiles, 64-row tasks
    k = draw(st.sampled_from([1, 7, 64, 255, 256, 257, 300]))  # 256-deep k-blocks
    n = draw(st.sampled_from([1, 31, 32, 33, 65, 290]))  # 32-wide panels, 8 per task
    if kind == "conv":
        x = af.input((1, draw(st.integers(1, 12)), min(m, 9) + 2, 6), name="img")
        w = wild_values(rng, (n, x.shape[1], 3, 3))
        y = af.conv(x, np.nan_to_num(w, posinf=65504, neginf=-65504), padding=1)
    else:
        batch = draw(st.sampled_from([(), (2,), (2, 1), (3,)]))
        x = af.input(batch + (m, k), name="a")
        if kind == "matmul":
            y = x @ np.nan_to_num(wild_values(rng, (k, n)), posinf=65504, neginf=-65504)
        elif kind == "linear":
            y = af.linear(x, np.clip(np.nan_to_num(wild_values(rng, (n, k))), -6e4, 6e4))
        else:
            y = af.bmm(x, af.input((k, n), name="b"))
    feeds = [wild_values(rng, t.shape).astype(np.float16) for t in af.compile(y).inputs]
    return y, feeds


@given(contractions())
@settings(PROFILE, max_examples=150)
def test_fast_contractions_equal_reference_bit_for_bit(case):
    y, feeds = case
    prog = af.compile(y)
    fast, ref = run_both(prog, feeds)
    assert same_bits(fast[0], ref[0])


# ---- (c) error bound on well-conditioned graphs ------------------------------------------
#
# Derivation. Each emulated op computes from fp16 operands that already carry an error
# e_in (max over elements of |emulated - exact|), and rounds its result to fp16 at least
# once. For an op with Lipschitz constant L (in the max norm) whose exact output has
# magnitude <= M, the new error is <= L e_in + u (M + L e_in) + tiny, u = 2**-11 (one
# fp16 rounding, tiny covering the subnormal range). Over a chain of n such ops with
# L <= 1 and magnitudes <= S this is the brief's n * u * S; contractions and narrow sums
# add their documented accumulation terms (K u for the fp16 sum, K u32 for the float32
# one, u for each product) and amplify by their |weight| column sums, which the clean
# strategy keeps <= 1. Rather than a single constant, the bound is accumulated node by
# node from the exact intermediate values, so every factor comes from the contract and
# none is fitted to the observed errors. Ops whose error is not bounded this way
# (discontinuous ones: sign, floor, comparisons; and exp/pow/div/log/inverse/(r)sqrt,
# norms) are left out of clean graphs.


def check_bounds(g):
    """Assert every clean step's emulated value is within its propagated bound."""
    tensors = [s.tensor for s in g.steps]
    prog = af.compile(tensors)
    feeds = feeds_for(prog, g)
    exact = as_list(af.reference(prog, *feeds))
    emulated = prog.run(*feeds)
    value = {id(t): v for t, v in zip(tensors, exact)}
    value.update({id(t): np.asarray(f, np.float64) for t, f in zip(g.inputs, g.feeds)})
    bound = {id(t): 0.0 for t in g.inputs}
    for step in g.steps:
        errs = [bound[id(s)] for s in step.srcs]
        vals = [value[id(s)] for s in step.srcs]
        out = value[id(step.tensor)]
        # an exact value near the fp16 overflow zone voids the bound (inf)
        bound[id(step.tensor)] = step.rule(errs, vals, out) if mx(out) < PEAK else math.inf
    finite = [math.isfinite(b) for b in bound.values()]
    assume(all(finite))  # an intermediate came near the overflow zone: no bound
    checked = 0
    for step, got, want in zip(g.steps, emulated, exact):
        err = mx(np.asarray(got, np.float64) - want)
        b = bound[id(step.tensor)]
        assert err <= b, (
            f"{step.name} -> {step.tensor.shape}: |emulated - exact| = {err:.3g} exceeds "
            f"the propagated bound {b:.3g} (max |exact| {mx(want):.3g})"
        )
        checked += 1
    return checked


@given(graphs(clean=True))
@settings(PROFILE, max_examples=400)
def test_clean_graphs_stay_within_the_propagated_error_bound(g):
    assume(g.steps)
    assert not g.unexpected, g.unexpected
    assert check_bounds(g) == len(g.steps)


def test_the_bound_is_tight_enough_to_fail():
    """The bound is a few units of roundoff: a 2-ulp slip at the largest output breaks it."""
    x = af.input((64,), name="x")
    feed = np.linspace(-2, 2, 64).astype(np.float16)
    y = x * 0.3 + 0.7  # 2 ops: the product's rounding error passes through the add
    got = np.asarray(af.compile(y)(feed), np.float64)
    want = af.reference(y, feed)
    prod = af.reference(x * 0.3, feed)
    bound = finish(mx(want), finish(mx(prod), 0.0))
    assert mx(got - want) <= bound
    assert bound <= 2 * 4 * U * mx(want)  # the brief's n_ops * 4 * u * scale, n_ops = 2
    i = int(np.argmax(np.abs(got)))
    slipped = got.astype(np.float16)
    for _ in range(2):
        slipped[i] = np.nextafter(slipped[i], np.float16(np.inf))
    assert mx(slipped.astype(np.float64) - want) > bound


def test_lipschitz_table_bounds_the_slopes():
    """Each Lipschitz constant is >= the steepest finite-difference slope of its kernel."""
    xs = np.linspace(-12.0, 12.0, 480001)
    cases = [(n, {}) for n in LIPSCHITZ if n != "clip"] + [
        ("gelu", {"approximate": "tanh"}),
        ("elu", {"alpha": 1.7}),
        ("leaky_relu", {"alpha": -0.5}),
        ("clip", {"lo": -1.0, "hi": 0.5}),
    ]
    for name, attrs in cases:
        full = get_op(name).normalize_attrs(attrs)
        ys = get_op(name).exact([xs], full)
        slope = float(np.max(np.abs(np.diff(ys) / np.diff(xs))))
        lip = max(1.0, abs(attrs["alpha"])) if "alpha" in attrs else LIPSCHITZ[name]
        assert slope <= lip, f"{name}: slope {slope} > table {lip}"
        assert slope >= 0.9 * lip, f"{name}: table {lip} is far above the slope {slope}"


# ---- (d) determinism ---------------------------------------------------------------------


@given(graphs())
@settings(PROFILE, max_examples=100)
def test_compiling_and_running_are_deterministic(g):
    p1, p2 = af.compile(g.outputs), af.compile(g.outputs)
    assert [id(n) for n in p1.nodes] == [id(n) for n in p2.nodes]
    assert [id(n) for n in p1.outputs] == [id(n) for n in p2.outputs]
    assert [id(n) for n in p1.inputs] == [id(n) for n in p2.inputs]
    assert p1.summary() == p2.summary()
    feeds = feeds_for(p1, g)
    first, second = p1.run(*feeds), p2.run(*feeds)
    third = af.EmulatorDevice(fast=True).run(p1, [np.array(f) for f in feeds])
    for a, b, c in zip(first, second, third):
        assert same_bits(a, b)
        assert same_bits(a, c)
