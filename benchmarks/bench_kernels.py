"""Kernel benchmark: the generic (scikit-learn API) path against the compiled one.

The same function is compiled twice: as the scikit-learn class the compiler knows (RBF
with ARD length scales, Matern 5/2 with ARD length scales, each times a ConstantKernel)
and as a subclass that redefines ``__call__`` with the parent's maths, which
:func:`skgp_sparse.kernels.compile_kernel` evaluates through scikit-learn's API
(a generic node). For what a training step asks of the kernel at a minibatch of 1024
rows of diamonds (d = 9) and M inducing inputs, the median wall time of

* ``cross``: ``K(Z, X_batch)`` and its theta-vjp (``vjp(Z, X)`` then ``back``),
* ``gram``: ``K(Z, Z)`` and its theta-vjp,
* ``diag``: the diagonal at ``X_batch`` and its theta-vjp,
* ``step``: the three together,

for M in {128, 256}, compiled and generic measured alternately in this one process so
that the ratios mean something on a shared machine. A second table times the generic
``cross`` part for several tile sizes (``skgp_sparse.kernels._generic.TILE_BYTES``, the
memory target of one scikit-learn gradient call), which is how its default was chosen.

    OMP_NUM_THREADS=1 python benchmarks/bench_kernels.py            # under a minute
    OMP_NUM_THREADS=1 python benchmarks/bench_kernels.py --quick    # smoke run

Results: benchmarks/results/kernels.json and a Markdown table on stdout.
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern
from threadpoolctl import threadpool_limits

# The package of this checkout, not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import init_inducing, load_diamonds

from skgp_sparse.kernels import _generic, compile_kernel

RESULTS = Path(__file__).parent / "results" / "kernels.json"
BATCH = 1024
SIZES = (128, 256)
PARTS = ("cross", "gram", "diag")
TILE_MIB = (0.25, 1, 2, 4, 32)


class OverridingRBF(RBF):
    """RBF with ``__call__`` redefined (same maths): compiled as a generic node."""

    def __call__(self, X, Y=None, eval_gradient=False):
        return super().__call__(X, Y, eval_gradient)


class OverridingMatern(Matern):
    """Matern with ``__call__`` redefined (same maths): compiled as a generic node."""

    def __call__(self, X, Y=None, eval_gradient=False):
        return super().__call__(X, Y, eval_gradient)


def kernel_pairs(d):
    """(name, compiled sklearn kernel, generic sklearn kernel of the same function)."""
    ls = np.ones(d)
    return [
        ("C * RBF (ARD)", ConstantKernel(1.0) * RBF(ls), ConstantKernel(1.0) * OverridingRBF(ls)),
        ("C * Matern 5/2 (ARD)", ConstantKernel(1.0) * Matern(ls, nu=2.5),
         ConstantKernel(1.0) * OverridingMatern(ls, nu=2.5)),
    ]


def part_call(ev, part, Z, X, bars):
    """One evaluation of ``part`` with its theta-vjp, as a zero-argument callable."""
    if part == "cross":
        def run():
            _, back = ev.vjp(Z, X)
            back(bars["cross"])
    elif part == "gram":
        def run():
            _, back = ev.vjp(Z)
            back(bars["gram"])
    else:
        def run():
            _, back = ev.diag_vjp(X)
            back(bars["diag"])
    return run


def time_pair(calls, repeats):
    """Median seconds of each callable, the callables run alternately."""
    times = [[] for _ in calls]
    for fn in calls:  # warm-up (numba compilation, caches)
        fn()
    for _ in range(repeats):
        for t, fn in zip(times, calls):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def check_agreement(compiled, generic, Z, X, bars):
    """Largest relative difference of values and theta-vjps (the two compute the same function)."""
    worst = 0.0
    for part in PARTS:
        if part == "cross":
            (k1, b1), (k2, b2) = compiled.vjp(Z, X), generic.vjp(Z, X)
        elif part == "gram":
            (k1, b1), (k2, b2) = compiled.vjp(Z), generic.vjp(Z)
        else:
            (k1, b1), (k2, b2) = compiled.diag_vjp(X), generic.diag_vjp(X)
        g1, g2 = b1(bars[part]), b2(bars[part])
        g1, g2 = (g1[0], g2[0]) if part != "diag" else (g1, g2)
        worst = max(worst, np.max(np.abs(k1 - k2)) / np.max(np.abs(k1)),
                    np.max(np.abs(g1 - g2)) / max(np.max(np.abs(g1)), 1e-300))
    return float(worst)


def run(quick, repeats, threads):
    X_train = load_diamonds()[0]
    if quick:
        X_train = X_train[:5000]
    d = X_train.shape[1]
    rng = np.random.default_rng(0)
    X = np.ascontiguousarray(X_train[np.sort(rng.choice(X_train.shape[0], BATCH, replace=False))])
    rows = []
    for m in SIZES:
        Z = init_inducing(X_train, m, random_state=1)
        bars = dict(cross=rng.normal(size=(m, BATCH)), gram=rng.normal(size=(m, m)), diag=rng.normal(size=BATCH))
        for name, sk_compiled, sk_generic in kernel_pairs(d):
            compiled, generic = compile_kernel(sk_compiled), compile_kernel(sk_generic)
            assert compiled.has_input_gradient and not generic.has_input_gradient
            # Hyperparameters away from 1 so that nothing is trivially cheap.
            theta = compiled.theta + rng.uniform(-0.5, 0.5, compiled.theta.size)
            compiled.set_theta(theta)
            generic.set_theta(theta)
            with threadpool_limits(threads):
                row = dict(kernel=name, M=m, batch=BATCH, d=d, n_theta=int(theta.size),
                           max_rel_difference=check_agreement(compiled, generic, Z, X, bars))
                for part in PARTS:
                    t_c, t_g = time_pair([part_call(compiled, part, Z, X, bars),
                                          part_call(generic, part, Z, X, bars)], repeats)
                    row[part] = dict(compiled_s=t_c, generic_s=t_g, ratio=t_g / t_c)
            step_c = sum(row[p]["compiled_s"] for p in PARTS)
            step_g = sum(row[p]["generic_s"] for p in PARTS)
            row["step"] = dict(compiled_s=step_c, generic_s=step_g, ratio=step_g / step_c)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def tile_sweep(repeats, threads):
    """Median seconds of the generic cross part for each tile size in :data:`TILE_MIB`."""
    X_train = load_diamonds()[0]
    rng = np.random.default_rng(2)
    X = np.ascontiguousarray(X_train[np.sort(rng.choice(X_train.shape[0], BATCH, replace=False))])
    default = _generic.TILE_BYTES
    rows = []
    try:
        for m in SIZES:
            Z = init_inducing(X_train, m, random_state=1)
            bars = dict(cross=rng.normal(size=(m, BATCH)))
            for name, _, sk_generic in kernel_pairs(X.shape[1]):
                generic = compile_kernel(sk_generic)
                calls = []
                for mib in TILE_MIB:
                    def call(mib=mib, fn=part_call(generic, "cross", Z, X, bars)):
                        _generic.TILE_BYTES = int(mib * 2**20)
                        fn()
                    calls.append(call)
                with threadpool_limits(threads):
                    times = time_pair(calls, repeats)
                rows.append(dict(kernel=name, M=m, default_mib=default / 2**20,
                                 cross_s={str(mib): t for mib, t in zip(TILE_MIB, times)}))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        _generic.TILE_BYTES = default
    return rows


def tile_markdown(rows):
    lines = ["| kernel | M | " + " | ".join(f"{mib:g} MiB" for mib in TILE_MIB) + " |",
             "|---|---|" + "---|" * len(TILE_MIB)]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['M']} | "
                     + " | ".join(f"{1e3 * r['cross_s'][str(mib)]:.1f} ms" for mib in TILE_MIB) + " |")
    return "\n".join(lines)


def markdown(rows):
    lines = [
        "| kernel | M | part | compiled (ms) | generic (ms) | generic / compiled |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for part in PARTS + ("step",):
            p = r[part]
            lines.append(f"| {r['kernel']} | {r['M']} | {part} | {1e3 * p['compiled_s']:.2f} | "
                         f"{1e3 * p['generic_s']:.2f} | {p['ratio']:.1f}x |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="5,000 diamonds rows, 3 repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    rows = run(args.quick, repeats, args.threads)
    tiles = tile_sweep(repeats, args.threads)
    table, tile_table = markdown(rows), tile_markdown(tiles)
    print()
    print(table)
    print()
    print(f"Generic cross part (K(Z, X) and its theta-vjp) by tile size; default {_generic.TILE_BYTES / 2**20:g} MiB:")
    print()
    print(tile_table)
    if args.quick:
        return
    results = dict(
        machine=dict(platform=platform.platform(), threads=args.threads,
                     note="shared 2-core machine; timings are noisy, compare within a run only"),
        command=f"OMP_NUM_THREADS={args.threads} python benchmarks/bench_kernels.py --repeats {repeats}",
        description="median seconds of a kernel product and its theta-vjp at a batch of 1024 diamonds rows "
                    "and M inducing inputs (cross: K(Z, X); gram: K(Z, Z); diag: diag K(X, X); step: the "
                    "three); compiled = this package's code, generic = the same function through "
                    "scikit-learn's API (a subclass overriding __call__)",
        rows=rows,
        table=table,
        tiles=tiles,
        tile_table=tile_table,
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
