"""Real models end to end: the ``light_*`` CNNs of the onnx wheel and all-MiniLM-L6-v2.

Per light model (seeded weights, see ``aneforge.models.light``):

- import (``from_onnx``) + compile + preflight/estimate on one target per family, timed;
- accuracy of the emulated outputs against the float64 reference executor and against
  onnxruntime float32 (cosine, relative L2, top-1 agreement);
- emulation time as a ratio to onnxruntime float32 on the same model and the same
  fp16-valued input, in the same process: three turns of a block of each engine's runs
  (``--repeats``, or more to fill 0.3 s), each engine's best block median compared
  (``timing.best_blocks``);
- the shipped stub weights (every weight 0.02): whether the emulation stays in fp16's
  range, and onnxruntime against the wheel's stored expected output.

ONNX Runtime runs with its default CPU threads, the emulator with numba's; both use the
machine's cores (``--threads N`` pins both to N threads, steadier on a loaded machine).
When ResNet-50's ratio exceeds the 10x goal (or with ``--profile``) the emulation of
ResNet-50 is profiled twice: per op kind (each node's kernel timed) and with cProfile
(the hottest functions).

The last lines are machine-readable::

    RESULT <model>_emu_vs_ort=<emulation time / onnxruntime time>
    RESULT minilm_cosine_min=<lowest cosine of the emulated embeddings vs float64>

With ``--zoo`` (or ``--models zoo`` for the zoo alone) the Hugging Face zoo of
``aneforge.testing.hf_zoo`` follows: per family its import, cosine against the float64
model, emulation time against onnxruntime float32 and Core ML export
(``RESULT zoo_<family>_emu_vs_ort=...``).

Run from the repository root:

    PYTHONPATH=src python3 bench/models.py [--models resnet50,squeezenet] [--repeats 3]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

try:
    from aneforge.models import light
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from aneforge.models import light
from timing import best_blocks  # this folder's helper: the script's folder is on sys.path

GOAL_RATIO = 10.0  # the goal: faithful emulation of ResNet-50 within 10x of ORT float32
MINILM_SENTENCES = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "A man is playing a guitar on the stage, and the crowd sings along.",
    "Neural engines run fp16 matrix multiplies with a wide accumulator.",
]


def op_profile(prog, args) -> list[tuple[str, float, int]]:
    """Seconds per op kind of one emulation (each node's kernel timed on its own)."""
    from aneforge.emulator.gemm import gemm
    from aneforge.graph.registry import get_op

    env, spent, count = {}, defaultdict(float), defaultdict(int)
    feeds = dict(zip((id(t) for t in prog.inputs), (a.astype(np.float16) for a in args)))
    with np.errstate(all="ignore"):
        for node in prog.nodes:
            if node.op == "input":
                env[id(node)] = feeds[id(node)]
                continue
            if node.op == "weight":
                env[id(node)] = node.value
                continue
            ins = [env[id(s)] for s in node.srcs]
            t0 = time.perf_counter()
            out = get_op(node.op).emulate(ins, node.attrs, gemm)
            env[id(node)] = np.asarray(out, dtype=np.float16).reshape(node.shape)
            spent[node.op] += time.perf_counter() - t0
            count[node.op] += 1
    return sorted(((op, t, count[op]) for op, t in spent.items()), key=lambda r: -r[1])


def cprofile_top(prog, args, n=15) -> str:
    prof = cProfile.Profile()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof.enable()
        prog(*args)
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(n)
    return out.getvalue()


def bench_model(name, repeats, stub=True, threads=None):
    build = light.build_light(name, weights="seeded")
    rep = light.run_light_model(name, weights="seeded", build=build)
    feeds = light.model_inputs(build.model, "seeded")
    args = build.args(feeds)
    sess = light.ort_session(build.model, threads=threads)
    row = {"name": name, "report": rep, "build": build, "args": args}
    if sess is not None:

        def emulate():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                build.program(*args)

        emu_s, ort_s = best_blocks(emulate, lambda: sess.run(None, feeds), repeats)
        row.update(emu_s=emu_s, ort_s=ort_s, ratio=emu_s / ort_s)
    else:
        row.update(emu_s=rep["emulate_seconds"], ort_s=None, ratio=None)
    if stub:
        row["stub"] = light.run_light_model(name, weights="stub", inputs="dummy")
    return row


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(rows, targets):
    arch = list(targets)
    head = (
        f"{'model':<13}{'import':>7}{'imp+cmp+est s':>14}{'emu s':>8}{'ort ms':>8}"
        f"{'emu/ort':>8}{'cos f64':>9}{'relL2 f64':>10}{'cos ort':>9}{'top1':>5}"
        f"{'stub':>12}  " + " ".join(f"{a + ' us':>9}" for a in arch)
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        rep = r["report"]
        out = rep["outputs"].get("logits") or next(iter(rep["outputs"].values()))
        setup = rep["import"]["seconds"] + rep["compile"]["seconds"] + rep["estimate_seconds"]
        est = []
        for a in arch:
            t = rep["targets"].get(a, {})
            if t.get("compiles"):
                est.append(f"{t['estimate_us']:>9.0f}")
            else:
                est.append(f"{'no MIL' if t.get('family') == 1 else 'limit':>9}")
        stub = r.get("stub", {}).get("status", "-")
        ort_ms = None if r["ort_s"] is None else 1e3 * r["ort_s"]
        print(
            f"{r['name']:<13}{'ok':>7}{setup:>14.2f}{r['emu_s']:>8.2f}{_fmt(ort_ms, '>8.1f')}"
            f"{_fmt(r['ratio'], '>8.1f')}{out['vs_float64']['cosine']:>9.6f}"
            f"{out['vs_float64']['rel_l2']:>10.2e}"
            f"{_fmt(out.get('vs_ort', {}).get('cosine'), '>9.6f')}"
            f"{('yes' if out.get('top1_agrees_float64') else 'no'):>5}{stub:>12}  " + " ".join(est)
        )


def print_blocked(rows):
    notes = []
    for r in rows:
        for arch, t in r["report"]["targets"].items():
            if not t.get("compiles") and t.get("family") != 1:
                notes.append(f"  {r['name']} on {arch}: {t['why_not'].split('; ')[-1]}")
    if notes:
        print("\n'limit': preflight refuses the graph on that family (one reason shown):")
        print("\n".join(notes))
    print("'no MIL': capability family 1 has no MIL path; nothing compiles there.")


def print_stub_details(rows):
    print("\nshipped stub weights (0.02 everywhere), the ONNX runner's arange/n input:")
    for r in rows:
        s = r.get("stub")
        if not s:
            continue
        peak = s.get("activation_max_abs", {})
        stored = s.get("ort_vs_stored", {}).get("max_abs")
        first = next(iter(s["outputs"].values()))
        print(
            f"  {r['name']:<13} status={s['status']:<11} emulated finite={first['finite']!s:<6}"
            f" float64 max|out|={first['float64_max_abs']:.3g}"
            f" max|activation| (ORT f32)={_fmt(peak.get('value'), '.3g')}"
            f" ORT vs stored output max abs={_fmt(stored, '.2g')}"
        )


def bench_minilm(batch=5):
    from aneforge.models import minilm

    m = minilm()
    t0 = time.perf_counter()
    emu = m.encode(MINILM_SENTENCES[:batch], seq_len="longest", batch_size=batch)
    emu_s = time.perf_counter() - t0
    ref = m.encode_reference(MINILM_SENTENCES[:batch], seq_len="longest", batch_size=batch)
    cos = np.sum(emu * ref, 1) / np.linalg.norm(emu, axis=1) / np.linalg.norm(ref, axis=1)
    times = []
    for _ in range(3):  # one sentence at the encoder's full 256 tokens: first, compiling, warm
        t0 = time.perf_counter()
        m.encode(MINILM_SENTENCES[:1])
        times.append(time.perf_counter() - t0)
    return {
        "cosines": cos,
        "emu_s": emu_s,
        "full_256_s": times[0],
        "warm_256_s": min(times[1:]),
    }


def bench_zoo(repeats, names=None) -> list[dict]:
    """The Hugging Face zoo (``aneforge.testing.hf_zoo``): per family, import from ONNX,
    cosine of the emulation against the float64 model, emulation time against
    onnxruntime float32 on the same fp16-valued inputs, the range analysis' hazards
    (inputs declared within their max |value|), whether the Core ML export succeeds,
    and the same model through ``from_torch``: its ops, its cosine and whether its
    output has the ONNX path's bits."""
    import tempfile

    import onnxruntime as ort

    from aneforge import range_analysis
    from aneforge.io import from_onnx, from_torch
    from aneforge.io.coreml_export import export_coreml
    from aneforge.testing import hf_zoo

    rows = []
    for name in names or hf_zoo.FAMILIES:
        print(f"... zoo {name}", file=sys.stderr, flush=True)
        model = hf_zoo.build(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = model.onnx_bytes()
        row = {"name": name}
        try:
            prog = from_onnx(data).compile()
        except Exception as exc:  # the table reports it
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
            rows.append(row)
            continue
        args = [v.astype(np.float16) if v.dtype.kind == "f" else v for v in model.inputs.values()]
        feeds = {
            k: (a.astype(np.float32) if a.dtype.kind == "f" else a)
            for k, a in zip(model.inputs, args)
        }
        sess = ort.InferenceSession(data)
        ref = model.reference()
        emulate = functools.partial(prog, *args)
        infer = functools.partial(sess.run, None, feeds)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = np.asarray(emulate(), np.float64)
            emu_s, ort_s = best_blocks(emulate, infer, repeats)
            try:
                export_coreml(prog, Path(tempfile.mkdtemp()) / f"{name}.mlpackage")
                coreml = "ok"
            except Exception as exc:  # the table reports it
                coreml = type(exc).__name__
            ranges = {k: float(np.abs(a).max()) for k, a in zip(model.inputs, args)
                      if a.dtype.kind == "f"}  # fmt: skip
            hazards = len(range_analysis(prog, input_ranges=ranges).hazards)
            torch_prog = from_torch(model.module, model.torch_inputs()).compile()
            torch_out = np.asarray(torch_prog(*args), np.float64)
        row.update(ops=len(prog.nodes), cosine=_cosine(out, ref), ratio=emu_s / ort_s,
                   coreml=coreml, hazards=hazards, torch_ops=len(torch_prog.nodes),
                   torch_cosine=_cosine(torch_out, ref),
                   same_bits=bool(np.array_equal(torch_out, out)))  # fmt: skip
        rows.append(row)
    print("\nHugging Face zoo (small random-weight configs, exported by torch to ONNX opset 17):")
    print(f"  {'model':<16}{'ops':>5}  {'cosine':>9}  {'hazards':>7}  {'emu/ORT':>8}  coreml  "
          f"{'torch ops':>9}  {'cosine':>9}  same bits")  # fmt: skip
    for r in rows:
        if "error" in r:
            print(f"  {r['name']:<16}import failed: {r['error']}")
            continue
        cells = f"{r['ops']:>5}  {r['cosine']:>9.6f}  {r['hazards']:>7}  {r['ratio']:>7.1f}x"
        torch = (
            f"{r['torch_ops']:>9}  {r['torch_cosine']:>9.6f}  {'yes' if r['same_bits'] else 'no'}"
        )
        print(f"  {r['name']:<16}{cells}  {r['coreml']:<6}  {torch}")
    return rows


def _cosine(x, y) -> float:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="", help="comma-separated subset (default all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (median)")
    parser.add_argument("--no-stub", action="store_true", help="skip the stub-weight runs")
    parser.add_argument("--no-minilm", action="store_true", help="skip all-MiniLM-L6-v2")
    parser.add_argument("--profile", action="store_true", help="profile ResNet-50 always")
    parser.add_argument(
        "--threads", type=int, default=0, help="threads for both (default: their own)"
    )
    parser.add_argument(
        "--zoo", action="store_true", help="also the Hugging Face zoo (needs transformers)"
    )
    opts = parser.parse_args(argv)
    if opts.threads > 0:
        import numba

        numba.set_num_threads(min(opts.threads, numba.config.NUMBA_NUM_THREADS))
    names = [n for n in opts.models.split(",") if n] or list(light.light_models())
    if opts.models == "zoo":  # the zoo alone
        names, opts.zoo, opts.no_minilm = [], True, True
    rows = []
    for name in names:
        print(f"... {name}", file=sys.stderr, flush=True)
        rows.append(
            bench_model(
                name, max(1, opts.repeats), stub=not opts.no_stub, threads=opts.threads or None
            )
        )
    if rows:
        print_table(rows, light.FAMILY_TARGETS)
        print_blocked(rows)
    if rows and not opts.no_stub:
        print_stub_details(rows)
    resnet = next((r for r in rows if r["name"] == "resnet50"), None)
    if resnet is not None and (opts.profile or (resnet["ratio"] or 0) > GOAL_RATIO):
        print(f"\nResNet-50 emulation, per op kind (ratio {_fmt(resnet['ratio'], '.1f')}x):")
        prof = op_profile(resnet["build"].program, resnet["args"])
        total = sum(t for _, t, _ in prof)
        for op, t, n in prof[:12]:
            print(f"  {op:<14}{n:>5} nodes {t:>8.3f} s {100 * t / total:>6.1f}%")
        print("\nResNet-50 emulation, cProfile (top functions by own time):")
        print(cprofile_top(resnet["build"].program, resnet["args"]))
    mini = None if opts.no_minilm else bench_minilm()
    if mini is not None:
        print(
            f"\nall-MiniLM-L6-v2: {len(mini['cosines'])} sentences emulated in "
            f"{mini['emu_s']:.2f} s (padded to the longest), one sentence at 256 tokens "
            f"in {mini['full_256_s']:.2f} s (first call: its program is built and runs op "
            "by op; the second compiles its regions), "
            f"{mini['warm_256_s']:.2f} s warm; cosine vs float64 reference: "
            + ", ".join(f"{c:.6f}" for c in mini["cosines"])
        )
    zoo = bench_zoo(max(1, opts.repeats)) if opts.zoo else []
    for r in rows:
        if r["ratio"] is not None:
            print(f"RESULT {r['name']}_emu_vs_ort={r['ratio']:.2f}")
    for r in zoo:
        if "ratio" in r:
            print(f"RESULT zoo_{r['name']}_emu_vs_ort={r['ratio']:.2f}")
    if mini is not None:
        print(f"RESULT minilm_cosine_min={float(np.min(mini['cosines'])):.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
