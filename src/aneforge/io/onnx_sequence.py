"""The recurrent and spectral part of the ONNX op table (handlers as in :mod:`.onnx_ops`).

- RNN, GRU and LSTM are unrolled over their (static) sequence length: the input
  projection of all steps is one ``linear`` (wide accumulator), then each step is a
  ``linear`` of the previous hidden state plus the gate activations, every op rounded
  once in fp16. Directions forward, reverse and bidirectional, ``layout`` 0 and 1,
  initial states, LSTM peepholes and ``input_forget``, GRU ``linear_before_reset``,
  ``clip`` (applied to the input of every activation) and constant ``sequence_lens``
  (finished sequences keep their state and output zeros) are expressed.
- Scan is unrolled over its static length, Loop over its trip count when that and its
  condition are known at import; the body is converted once per step.
- DFT and STFT are matmuls by constant cosine / sine matrices (fp16 weights, wide
  accumulator); the real and imaginary parts are stacked on the last axis as in ONNX.
"""

from __future__ import annotations

import numpy as np

from .onnx_errors import NotExpressible
from .onnx_ops import handles, matmul, norm_axis, pad_constant, reshape, slice_axis, take
from .onnx_values import Host

# ---- activations -------------------------------------------------------------------------

# name -> (number of parameters, defaults)
_ACTIVATIONS = {
    "relu": (0, ()), "tanh": (0, ()), "sigmoid": (0, ()), "softsign": (0, ()),
    "softplus": (0, ()), "elu": (1, (1.0,)), "leakyrelu": (1, (0.01,)),
    "thresholdedrelu": (1, (1.0,)), "scaledtanh": (2, (1.0, 1.0)),
    "hardsigmoid": (2, (0.2, 0.5)), "affine": (2, (1.0, 0.0)),
}  # fmt: skip


def _activation_list(at, defaults):
    """[(name, params)] for the node's activations (defaults per direction)."""
    names = [n.lower() for n in at.get("activations", [])] or list(defaults)
    alphas = list(at.get("activation_alpha", []))
    betas = list(at.get("activation_beta", []))
    out = []
    for name in names:
        if name not in _ACTIVATIONS:
            raise NotExpressible(f"activation {name!r} is not expressible")
        n, dflt = _ACTIVATIONS[name]
        params = []
        if n >= 1:
            params.append(alphas.pop(0) if alphas else dflt[0])
        if n >= 2:
            params.append(betas.pop(0) if betas else dflt[1])
        out.append((name, params))
    return out


def _apply(cx, act, x, clip):
    name, p = act
    if clip is not None:
        x = cx.op("clip", x, lo=-clip, hi=clip)
    if name in ("relu", "tanh", "sigmoid", "softplus"):
        return cx.op(name, x)
    if name == "softsign":
        return cx.op("div", x, cx.op("add", cx.op("abs", x), 1.0))
    if name == "elu":
        return cx.op("elu", x, alpha=p[0])
    if name == "leakyrelu":
        return cx.op("leaky_relu", x, alpha=p[0])
    if name == "thresholdedrelu":
        return cx.op("select", cx.op("greater", x, p[0]), x, 0.0)
    if name == "scaledtanh":
        return cx.op("mul", cx.op("tanh", cx.op("mul", x, p[1])), p[0])
    if name == "hardsigmoid":
        return cx.op("clip", cx.op("add", cx.op("mul", x, p[0]), p[1]), lo=0.0, hi=1.0)
    return cx.op("add", cx.op("mul", x, p[0]), p[1])  # affine


# ---- the unrolled recurrences ------------------------------------------------------------


class _Recurrence:
    """What RNN, GRU and LSTM share: inputs, directions, state slicing and outputs."""

    def __init__(self, cx, node, ins, at, n_gates, default_acts):
        self.cx, self.at = cx, at
        x = cx.t(ins[0])
        self.layout = at.get("layout", 0)
        if self.layout:
            x = cx.op("transpose", x, perm=(1, 0, 2))
        self.x = x
        self.seq, self.batch = x.shape[0], x.shape[1]
        self.hidden = at.get("hidden_size") or cx.t(ins[2]).shape[-1]
        direction = at.get("direction", "forward")
        self.dirs = 2 if direction == "bidirectional" else 1
        self.reverse = [direction == "reverse", True][: self.dirs]
        self.w, self.r = cx.t(ins[1]), cx.t(ins[2])
        self.b = _opt(cx, ins, 3)
        self.n = n_gates
        acts = _activation_list(at, default_acts * self.dirs)
        per = len(acts) // self.dirs
        self.acts = [acts[d * per : (d + 1) * per] for d in range(self.dirs)]
        self.clip = at.get("clip")
        self.steps_valid = None
        lens = ins[4] if len(ins) > 4 else None
        if lens is not None:
            lens = cx.arr(lens, "sequence_lens").astype(np.int64).reshape(-1)
            if (lens != self.seq).any():
                valid = np.arange(self.seq)[:, None] < lens[None, :]  # (seq, batch)
                self.steps_valid = valid

    def dir_slice(self, t, d, rows=None):
        """Direction ``d`` of a [dirs, rows, cols] parameter, optionally some rows."""
        y = reshape(self.cx, slice_axis(self.cx, t, 0, d, d + 1), t.shape[1:])
        if rows is not None:
            y = slice_axis(self.cx, y, 0, rows[0], rows[1])
        return y

    def bias(self, d, lo, hi, recurrent):
        """The input (Wb) or recurrent (Rb) bias of gates ``lo:hi``, or None."""
        if self.b is None:
            return None
        h = self.hidden
        b = reshape(self.cx, slice_axis(self.cx, self.b, 0, d, d + 1), (2 * self.n * h,))
        start = self.n * h if recurrent else 0
        return slice_axis(self.cx, b, 0, start + lo * h, start + hi * h)

    def recurrent(self, h, d, lo, hi):
        """h @ R[lo:hi gates]^T + Rb[lo:hi] (one linear: the ONNX order of the sums)."""
        n = self.hidden
        r = self.dir_slice(self.r, d, (lo * n, hi * n))
        bias = self.bias(d, lo, hi, True)
        return self.cx.op("linear", h, r, *([bias] if bias is not None else []))

    def initial(self, value, d):
        if value is None:
            return self.cx.t(Host(np.zeros((self.batch, self.hidden)), label="zero state"))
        v = self.cx.t(value)
        if self.layout:
            v = self.cx.op("transpose", v, perm=(1, 0, 2))
        return reshape(self.cx, slice_axis(self.cx, v, 0, d, d + 1), (self.batch, self.hidden))

    def order(self, d):
        return range(self.seq - 1, -1, -1) if self.reverse[d] else range(self.seq)

    def projected(self, d, lo, hi):
        """x @ W[lo:hi gates]^T + Wb[lo:hi] for every step: [seq, batch, (hi-lo)*h]."""
        h = self.hidden
        w = self.dir_slice(self.w, d, (lo * h, hi * h))
        bias = self.bias(d, lo, hi, False)
        return self.cx.op("linear", self.x, w, *([bias] if bias is not None else []))

    def step_input(self, proj, t):
        return reshape(self.cx, slice_axis(self.cx, proj, 0, t, t + 1), proj.shape[1:])

    def keep(self, t, new, old):
        """Finished sequences keep ``old``."""
        if self.steps_valid is None:
            return new
        mask = Host(self.steps_valid[t][:, None].astype(np.float64), label="sequence mask")
        return self.cx.op("select", self.cx.t(mask), new, old)

    def output(self, t, h):
        if self.steps_valid is None:
            return h
        mask = Host(self.steps_valid[t][:, None].astype(np.float64), label="sequence mask")
        return self.cx.op("select", self.cx.t(mask), h, 0.0)

    def outputs(self, ys, finals, extra=()):
        """Y [seq, dirs, batch, h], Y_h [dirs, batch, h] (and extra states), by layout."""
        cx = self.cx
        per_dir = []
        for d in range(self.dirs):
            steps = [
                reshape(cx, ys[d][t], (1, 1, self.batch, self.hidden)) for t in range(self.seq)
            ]
            per_dir.append(steps[0] if len(steps) == 1 else cx.op("concat", *steps, axis=0))
        y = per_dir[0] if self.dirs == 1 else cx.op("concat", *per_dir, axis=1)
        states = []
        for group in (finals, *extra):
            parts = [reshape(cx, s, (1, self.batch, self.hidden)) for s in group]
            states.append(parts[0] if len(parts) == 1 else cx.op("concat", *parts, axis=0))
        if self.layout:
            y = cx.op("transpose", y, perm=(2, 0, 1, 3))
            states = [cx.op("transpose", s, perm=(1, 0, 2)) for s in states]
        return [y, *states]


def _opt(cx, ins, i):
    return cx.t(ins[i]) if len(ins) > i and ins[i] is not None else None


@handles("RNN")
def _rnn(cx, node, ins, at):
    rec = _Recurrence(cx, node, ins, at, 1, ("tanh",))
    ys, finals = [], []
    for d in range(rec.dirs):
        proj = rec.projected(d, 0, 1)
        h = rec.initial(ins[5] if len(ins) > 5 else None, d)
        out = [None] * rec.seq
        for t in rec.order(d):
            pre = cx.op("add", rec.step_input(proj, t), rec.recurrent(h, d, 0, 1))
            h = rec.keep(t, _apply(cx, rec.acts[d][0], pre, rec.clip), h)
            out[t] = rec.output(t, h)
        ys.append(out)
        finals.append(h)
    return rec.outputs(ys, finals)


@handles("GRU")
def _gru(cx, node, ins, at):
    rec = _Recurrence(cx, node, ins, at, 3, ("sigmoid", "tanh"))
    hid = rec.hidden
    before_reset = at.get("linear_before_reset", 0)
    ys, finals = [], []
    for d in range(rec.dirs):
        f, g = rec.acts[d]
        zr_proj = rec.projected(d, 0, 2)
        h_proj = rec.projected(d, 2, 3)
        h = rec.initial(ins[5] if len(ins) > 5 else None, d)
        out = [None] * rec.seq
        for t in rec.order(d):
            zr = cx.op("add", rec.step_input(zr_proj, t), rec.recurrent(h, d, 0, 2))
            zr = _apply(cx, f, zr, rec.clip)
            z, r = slice_axis(cx, zr, 1, 0, hid), slice_axis(cx, zr, 1, hid, 2 * hid)
            xh = rec.step_input(h_proj, t)
            if before_reset:  # x Wh^T + Wbh + r * (h Rh^T + Rbh)
                pre = cx.op("add", xh, cx.op("mul", r, rec.recurrent(h, d, 2, 3)))
            else:  # x Wh^T + Wbh + (r * h) Rh^T + Rbh
                pre = cx.op("add", xh, rec.recurrent(cx.op("mul", r, h), d, 2, 3))
            cand = _apply(cx, g, pre, rec.clip)
            new = cx.op("add", cx.op("mul", cx.op("sub", 1.0, z), cand), cx.op("mul", z, h))
            h = rec.keep(t, new, h)
            out[t] = rec.output(t, h)
        ys.append(out)
        finals.append(h)
    return rec.outputs(ys, finals)


@handles("LSTM")
def _lstm(cx, node, ins, at):
    rec = _Recurrence(cx, node, ins, at, 4, ("sigmoid", "tanh", "tanh"))
    hid = rec.hidden
    peep = _opt(cx, ins, 7)
    ys, finals, cells = [], [], []
    for d in range(rec.dirs):
        f, g, hact = rec.acts[d]
        proj = rec.projected(d, 0, 4)
        h = rec.initial(ins[5] if len(ins) > 5 else None, d)
        c = rec.initial(ins[6] if len(ins) > 6 else None, d)
        p = None
        if peep is not None:
            p = reshape(cx, slice_axis(cx, peep, 0, d, d + 1), (3 * hid,))
        out = [None] * rec.seq
        for t in rec.order(d):
            gates = cx.op("add", rec.step_input(proj, t), rec.recurrent(h, d, 0, 4))

            def gate(k, gates=gates):
                return slice_axis(cx, gates, 1, k * hid, (k + 1) * hid)

            gi, go, gf, gc = gate(0), gate(1), gate(2), gate(3)  # ONNX order: i, o, f, c
            if p is not None:
                gi = cx.op("add", gi, cx.op("mul", c, slice_axis(cx, p, 0, 0, hid)))
                gf = cx.op("add", gf, cx.op("mul", c, slice_axis(cx, p, 0, 2 * hid, 3 * hid)))
            i = _apply(cx, f, gi, rec.clip)
            fg = cx.op("sub", 1.0, i) if at.get("input_forget", 0) else _apply(cx, f, gf, rec.clip)
            cand = _apply(cx, g, gc, rec.clip)
            c_new = cx.op("add", cx.op("mul", fg, c), cx.op("mul", i, cand))
            if p is not None:
                go = cx.op("add", go, cx.op("mul", c_new, slice_axis(cx, p, 0, hid, 2 * hid)))
            o = _apply(cx, f, go, rec.clip)
            h_new = cx.op("mul", o, _apply(cx, hact, c_new, rec.clip))
            h, c = rec.keep(t, h_new, h), rec.keep(t, c_new, c)
            out[t] = rec.output(t, h)
        ys.append(out)
        finals.append(h)
        cells.append(c)
    return rec.outputs(ys, finals, (cells,))


# ---- DFT / STFT ---------------------------------------------------------------------------


def _dft_matrices(n, k, inverse):
    """(cos, sin) matrices [n, k] of the DFT kernel e^(-+2 pi i k n / N) (1/N inverse)."""
    angle = 2.0 * np.pi * np.outer(np.arange(n), np.arange(k)) / n
    scale = 1.0 / n if inverse else 1.0
    return np.cos(angle) * scale, np.sin(angle) * scale


def _spectrum(cx, re, im, n, k, inverse):
    """Real and imaginary parts of the DFT of re + i*im over the last axis."""
    cos, sin = _dft_matrices(n, k, inverse)
    cw, sw = Host(cos, label="dft cos"), Host(sin, label="dft sin")
    sign = 1.0 if inverse else -1.0  # forward: e^(-i t) = cos - i sin
    out_re = matmul(cx, re, cw)
    out_im = cx.op("mul", matmul(cx, re, sw), sign)
    if im is not None:
        out_re = cx.op("sub", out_re, cx.op("mul", matmul(cx, im, sw), sign))
        out_im = cx.op("add", out_im, matmul(cx, im, cw))
    return out_re, out_im


def _stack_complex(cx, re, im):
    shape = re.shape + (1,)
    return cx.op("concat", reshape(cx, re, shape), reshape(cx, im, shape), axis=-1)


@handles("DFT")
def _dft(cx, node, ins, at):
    x = cx.t(ins[0])
    if cx.opset >= 20:
        axis = int(cx.arr(ins[2], "axis").reshape(-1)[0]) if len(ins) > 2 and ins[2] else -2
    else:
        axis = at.get("axis", 1)
    axis = norm_axis(axis, x.ndim)
    if axis == x.ndim - 1:
        raise NotExpressible("axis is the real/imaginary axis")
    inverse, onesided = at.get("inverse", 0), at.get("onesided", 0)
    last = x.ndim - 1
    re = reshape(cx, slice_axis(cx, x, last, 0, 1), x.shape[:-1])
    im = None
    if x.shape[-1] == 2:
        im = reshape(cx, slice_axis(cx, x, last, 1, 2), x.shape[:-1])
    perm = [a for a in range(last) if a != axis] + [axis]
    moved = [None if v is None else cx.op("transpose", v, perm=tuple(perm)) for v in (re, im)]
    n = x.shape[axis]
    if inverse and onesided:  # one-sided spectrum in, real signal out (irfft)
        n = 2 * (n - 1)
    if len(ins) > 1 and ins[1] is not None:
        n = int(cx.arr(ins[1], "dft_length").reshape(-1)[0])
    back = tuple(int(p) for p in np.argsort(perm))
    if inverse and onesided:
        moved = [None if v is None else _fit(cx, v, n // 2 + 1) for v in moved]
        y = cx.op("transpose", _irfft(cx, moved[0], moved[1], n), perm=back)
        return [reshape(cx, y, y.shape + (1,))]
    moved = [None if v is None else _fit(cx, v, n) for v in moved]
    k = n // 2 + 1 if onesided else n
    out_re, out_im = _spectrum(cx, moved[0], moved[1], n, k, inverse)
    out_re = cx.op("transpose", out_re, perm=back)
    out_im = cx.op("transpose", out_im, perm=back)
    return [_stack_complex(cx, out_re, out_im)]


def _irfft(cx, re, im, n):
    """The real signal of length n whose one-sided spectrum is re + i*im (last axis):
    x[t] = sum_k c_k (Re X_k cos(2 pi k t / n) - Im X_k sin(2 pi k t / n)) / n, with
    c_k = 2 for the bins that stand for a conjugate pair and 1 for DC (and Nyquist)."""
    k = n // 2 + 1
    weight = np.full(k, 2.0)
    weight[0] = 1.0
    if n % 2 == 0:
        weight[-1] = 1.0
    angle = 2.0 * np.pi * np.outer(np.arange(k), np.arange(n)) / n
    cos = Host(weight[:, None] * np.cos(angle) / n, label="irfft cos")
    y = matmul(cx, re, cos)
    if im is not None:
        sin = Host(-weight[:, None] * np.sin(angle) / n, label="irfft sin")
        y = cx.op("add", y, matmul(cx, im, sin))
    return y


def _fit(cx, v, length):
    """Truncate or zero-pad the last axis to ``length``."""
    n = v.shape[-1]
    if length < n:
        return slice_axis(cx, v, v.ndim - 1, 0, length)
    if length > n:
        return pad_constant(cx, v, [(0, 0)] * (v.ndim - 1) + [(0, length - n)], 0.0)
    return v


@handles("STFT")
def _stft(cx, node, ins, at):
    x = cx.t(ins[0])  # [batch, signal_length, 1 or 2]
    step = int(cx.arr(ins[1], "frame_step").reshape(-1)[0])
    window = ins[2] if len(ins) > 2 else None
    if len(ins) > 3 and ins[3] is not None:
        length = int(cx.arr(ins[3], "frame_length").reshape(-1)[0])
    elif window is not None:
        length = cx.t(window).shape[0]
    else:
        length = x.shape[1]
    frames = (x.shape[1] - length) // step + 1
    if frames < 1:
        raise NotExpressible(f"frame_length {length} exceeds the signal {x.shape[1]}")
    index = (np.arange(frames)[:, None] * step + np.arange(length)[None, :]).reshape(-1)
    parts = []
    for c in range(x.shape[2]):
        part = reshape(cx, slice_axis(cx, x, 2, c, c + 1), x.shape[:2])
        part = reshape(cx, take(cx, part, index, 1), (x.shape[0], frames, length))
        if window is not None:
            part = cx.op("mul", part, window)
        parts.append(part)
    onesided = at.get("onesided", 1) and x.shape[2] == 1
    k = length // 2 + 1 if onesided else length
    out_re, out_im = _spectrum(cx, parts[0], parts[1] if len(parts) > 1 else None, length, k, False)
    return [_stack_complex(cx, out_re, out_im)]


# ---- Scan ------------------------------------------------------------------------------------

_MAX_UNROLL = 4096  # the most steps a Scan or Loop is unrolled into


@handles("Scan")
def _scan(cx, node, ins, at):
    """``Scan`` over its static sequence length: the body converted once per step."""
    body, m = at["body"], at["num_scan_inputs"]
    if not 0 < m <= len(ins):
        raise NotExpressible(f"num_scan_inputs={m} with {len(ins)} inputs")
    n = len(ins) - m
    states, scans = list(ins[:n]), ins[n:]
    k = len(body.output) - n
    in_dirs = list(at.get("scan_input_directions", [0] * m))
    out_axes = list(at.get("scan_output_axes", [0] * k))
    out_dirs = list(at.get("scan_output_directions", [0] * k))
    shapes = [np.shape(v.value) if isinstance(v, Host) else v.shape for v in scans]
    if any(len(s) == 0 for s in shapes):
        raise NotExpressible("a scalar scan input has no axis to scan")
    in_axes = [a % len(s) for a, s in zip(at.get("scan_input_axes", [0] * m), shapes)]
    lengths = {s[a] for s, a in zip(shapes, in_axes)}
    if len(lengths) != 1:
        raise NotExpressible(f"scan inputs of different lengths {sorted(lengths)}")
    steps = lengths.pop()
    if steps > _MAX_UNROLL:
        raise NotExpressible(f"{steps} steps to unroll (aneforge unrolls at most {_MAX_UNROLL})")
    if steps == 0 and k:
        raise NotExpressible("a scan of length 0 has empty scan outputs")
    collected = [[] for _ in range(k)]
    for t in range(steps):
        bind = {f.name: v for f, v in zip(body.input[:n], states)}
        for f, v, axis, rev in zip(body.input[n:], scans, in_axes, in_dirs):
            i = steps - 1 - t if rev else t
            if isinstance(v, Host):
                bind[f.name] = Host(np.take(v.value, i, axis=axis))
            else:
                part = slice_axis(cx, v, axis, i, i + 1)
                bind[f.name] = reshape(cx, part, v.shape[:axis] + v.shape[axis + 1 :])
        outs = cx.subgraph(body, bind)
        states = outs[:n]
        for j, v in enumerate(outs[n:]):
            collected[j].append(v)
    results = list(states)
    for j, items in enumerate(collected):
        items = items[::-1] if out_dirs[j] else items
        if items and all(isinstance(v, Host) for v in items):  # a constant scan stays exact
            arrays = [np.asarray(v.value) for v in items]
            axis = out_axes[j] % (arrays[0].ndim + 1)
            results.append(Host(np.stack(arrays, axis=axis), label="scan output"))
            continue
        parts = []
        for v in items:
            v = cx.t(v)
            axis = out_axes[j] % (v.ndim + 1)
            parts.append(reshape(cx, v, v.shape[:axis] + (1,) + v.shape[axis:]))
        results.append(parts[0] if len(parts) == 1 else cx.op("concat", *parts, axis=axis))
    return results


# ---- Loop ------------------------------------------------------------------------------------


def _stack(cx, items):
    """Per-iteration values stacked on a new leading axis (on the host when constant)."""
    if all(isinstance(v, Host) for v in items):
        return Host(np.stack([np.asarray(v.value) for v in items]), label="loop output")
    parts = [reshape(cx, v, (1,) + cx.t(v).shape) for v in items]
    return parts[0] if len(parts) == 1 else cx.op("concat", *parts, axis=0)


def _scalar(cx, value, what: str):
    values = cx.arr(value, what).reshape(-1)
    if values.size != 1:
        raise NotExpressible(f"{what} must hold one value, not {values.size}")
    return values[0]


def _keeps_condition(body) -> bool:
    """Whether the body hands its condition input on unchanged (a counted loop)."""
    out, given = body.output[0].name, body.input[1].name
    return out == given or any(
        n.op_type == "Identity" and list(n.input) == [given] and list(n.output) == [out]
        for n in body.node
    )


@handles("Loop")
def _loop(cx, node, ins, at):
    """``Loop`` unrolled: its trip count and every condition must be known at import."""
    body = at["body"]
    trips = None if not ins or ins[0] is None else int(_scalar(cx, ins[0], "M"))
    cond = True
    if len(ins) > 1 and ins[1] is not None:
        cond = bool(_scalar(cx, ins[1], "cond"))
    carried = list(ins[2:])
    n = len(carried)
    if len(body.input) != 2 + n or len(body.output) < 1 + n:
        raise NotExpressible(
            f"its body takes {len(body.input)} inputs and gives {len(body.output)} outputs "
            f"for {n} loop-carried values"
        )
    if trips is not None and trips > _MAX_UNROLL and cond and _keeps_condition(body):
        raise NotExpressible(f"M={trips} iterations to unroll (at most {_MAX_UNROLL})")
    collected = [[] for _ in range(len(body.output) - 1 - n)]
    i = 0
    while cond and (trips is None or i < trips):
        if i >= _MAX_UNROLL:
            raise NotExpressible(f"more than {_MAX_UNROLL} iterations to unroll")
        bind = {body.input[0].name: Host(np.array(i, dtype=np.int64))}
        bind[body.input[1].name] = Host(np.array(cond))
        bind.update({f.name: v for f, v in zip(body.input[2:], carried)})
        outs = cx.subgraph(body, bind)
        cond = bool(_scalar(cx, outs[0], "the loop condition"))
        carried = outs[1 : 1 + n]
        for j, v in enumerate(outs[1 + n :]):
            collected[j].append(v)
        i += 1
    if any(not items for items in collected):
        raise NotExpressible("a loop that runs zero times has empty scan outputs")
    return carried + [_stack(cx, items) for items in collected]
