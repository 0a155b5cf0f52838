"""GPU benchmark (issue 15): our training step on CuPy (or PyTorch CUDA) against GPyTorch on CUDA.

One process measures, on the same standardised diamonds arrays and the same initial inducing
inputs as the CPU benchmark (``bench_regression.py``):

a. time per training step of our coupled basis on the GPU against GPyTorch's SVGP on the same
   GPU (natural gradients on q(u), Adam on the rest: its ``ngd`` mode), same M, batch, dtype;
b. time per step of the bases ``solve``, ``orth_decoupled`` and ``inverse_free`` on the GPU,
   relative to the coupled basis (the bases with an orthogonal set get M more points in it,
   as in ``bench_regression.py``);
c. the GPU step against our numpy (CPU) step at the same settings (the CPU side runs M up to
   ``--cpu-max-m`` only, and ``--cpu-steps`` steps: its large-M steps take seconds each);
d. diamonds test RMSE and NLPD of ``SparseGPRegressor(backend="cupy")`` in float64 and float32
   against ``backend="numpy"`` (M=256, batch 1024, 25 epochs, the CPU benchmark's split and
   settings);
e. whole default fits, every setting at its default but ``backend`` and ``dtype``: on diamonds
   the GPU against the CPU (accuracy and time), and on the million-row friedman1 set (noise
   sd 0.2, known noise floor) the time to the floor (the CPU side there with
   ``--cpu-default-sets friedman1``).

The grid of a-c is M in {256, 1024, 4096} x batch in {1024, 8192} x {float32, float64}. The
contenders of one grid point are timed in turns (``--repeats`` rounds, the order rotated each
round) so that a change of load hits all alike; each timing is the median over ``--n-steps``
steps after ``--warmup`` untimed ones, the device synchronised before every clock read, and the
best median of the rounds counts.

    python benchmarks/bench_gpu.py                    # all sections, ours on CuPy (20-30 min)
    python benchmarks/bench_gpu.py --library torch    # ours on PyTorch's CUDA device instead
    python benchmarks/bench_gpu.py --only steps       # sections a-c only (--only accuracy: d, defaults: e)
    python benchmarks/bench_gpu.py --quick            # GPU smoke run: tiny grid, seconds
    python benchmarks/bench_gpu.py --cpu-smoke        # no GPU: everything on torch CPU, tiny grid

Needs CuPy (``pip install -e '.[gpu]'``) and/or a CUDA build of PyTorch, and GPyTorch.
Results: benchmarks/results/gpu.json (``--quick`` and ``--cpu-smoke``: results/quick/) and a
Markdown summary on stdout that names the GPU (docs/benchmarks.md, "GPU"). ``--cpu-smoke``
checks the script end to end on a machine without a GPU; its timings mean nothing.
"""

import os

# scikit-learn's array_api_dispatch (the --cpu-smoke accuracy route) needs this set before
# scipy is imported.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from _data import gaussian_nlpd, init_inducing, load_regression, rmse  # noqa: E402
from _ours import basis_settings, implemented_bases, installed_versions, synchronize, time_our_step  # noqa: E402

RESULTS_DIR = Path(__file__).parent / "results"
OTHER_BASES = ("solve", "orth_decoupled", "inverse_free")


# --------------------------------------------------------------------------------------
# where things run
# --------------------------------------------------------------------------------------
class Target:
    """Our array library and device, the peer's torch device, and the GPU's name.

    Parameters
    ----------
    library : {"cupy", "torch"}
        Array library of our GPU side.
    device : str
        ``"cuda"``, ``"cuda:<i>"`` or (``--cpu-smoke``) ``"cpu"``.
    """

    def __init__(self, library, device):
        from skgp_sparse import backend

        self.library = library
        self.peer_device = device
        if library == "cupy":
            if not device.startswith("cuda"):
                raise SystemExit("--library cupy needs a CUDA device (--device cuda[:i]); "
                                 "use --cpu-smoke (torch on the CPU) on a machine without a GPU")
            try:
                import cupy
            except ImportError as exc:
                raise SystemExit(f"--library cupy: CuPy is not installed ({exc}); pip install "
                                 "-e '.[gpu]' or use --library torch") from exc
            index = int(device.split(":")[1]) if ":" in device else 0
            if cupy.cuda.runtime.getDeviceCount() <= index:
                raise SystemExit(f"--library cupy: CuPy sees no GPU {index}")
            # CuPy works on its current device: make it the one asked for, and let the
            # arrays go there by default (device None).
            cupy.cuda.Device(index).use()
            self.xp = backend.namespace(cupy.empty(0))
            self.device = None
            name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
            self.name = name.decode() if isinstance(name, bytes) else str(name)
        elif library == "torch":
            import torch

            dev = torch.device(device)
            if dev.type == "cuda":
                if not torch.cuda.is_available():
                    raise SystemExit("--library torch: this PyTorch build sees no CUDA device; "
                                     "use --cpu-smoke to check the script on the CPU")
                dev = torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)
                self.name = torch.cuda.get_device_name(dev)
            else:
                self.name = f"CPU ({platform.processor() or platform.machine()}; torch, --cpu-smoke)"
            self.xp = backend.namespace(torch.empty(0))
            self.device = dev
        else:
            raise SystemExit(f"unknown --library {library!r}")
        self.on_gpu = device.startswith("cuda")

    def sync(self):
        """Barrier on our device and on the peer's."""
        synchronize(self.xp, self.device)
        from _gpytorch_peer import synchronize as peer_sync

        peer_sync(self.peer_device)

    def free(self):
        """Hand cached device memory back between grid points (the two libraries' pools
        share one GPU)."""
        if self.library == "cupy":
            import cupy

            cupy.get_default_memory_pool().free_all_blocks()
        import torch

        if self.on_gpu and torch.cuda.is_available():
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------
# a-c: step times
# --------------------------------------------------------------------------------------
def _attempt(errors, key, fn):
    """``fn()``, or None after recording why it failed (once per key): one contender that
    does not run (a basis without a GPU path yet) must not end the run."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - reported, and the run goes on
        message = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
        if key not in errors:
            errors[key] = message
            print(f"  skipped {key}: {message}", flush=True)
        return None


def step_times(X, y, target, args, grid, dtypes):
    """Rows of median milliseconds per step for every (dtype, M, batch) of the grid."""
    from _gpytorch_peer import time_gpytorch_step

    bases = [b for b in ["coupled", *OTHER_BASES] if b in implemented_bases()]
    rows, errors = [], {}
    for dtype in dtypes:
        for M, batch in grid:
            points = {b: init_inducing(X, M + basis_settings(b, M)["n_orthogonal"], random_state=0) for b in bases}
            contenders = {}
            for b in bases:
                contenders[f"gpu:{b}"] = (lambda b=b: time_our_step(
                    X, y, points[b], batch, args.n_steps, n_warmup=args.warmup, xp=target.xp,
                    device=target.device, dtype=dtype, **basis_settings(b, M)))
            for mode in args.peer_modes:
                contenders[f"gpytorch:{mode}"] = (lambda mode=mode: time_gpytorch_step(
                    X, y, points["coupled"], batch, args.n_steps, mode=mode, n_warmup=args.warmup,
                    threads=args.threads, device=target.peer_device, dtype=dtype))
            if M <= args.cpu_max_m:
                contenders["cpu:coupled"] = lambda: _cpu_step(X, y, points["coupled"], batch, M, dtype, args)
            timings = {name: [] for name in contenders}
            if (M, batch) == grid[0]:
                # One untimed round first: process-wide first-use costs (CUDA context, cuBLAS
                # and cuSOLVER handles, CuPy's kernel compilation) must not land on whichever
                # contender happens to run first.
                for name, fn in contenders.items():
                    _attempt(errors, f"{name} {dtype}", fn)
            for r in range(args.repeats):
                names = list(contenders)
                shift = r % len(names)  # rotated: no contender always follows the same one
                for name in names[shift:] + names[:shift]:
                    target.sync()
                    seconds = _attempt(errors, f"{name} {dtype}", contenders[name])
                    if seconds is not None:
                        timings[name].append(seconds)
            target.free()
            row = _step_row(dtype, M, batch, timings, bases, args.peer_modes)
            rows.append(row)
            print({k: v for k, v in row.items() if k != "medians_ms"}, flush=True)
    return rows, errors


def _cpu_step(X, y, Z, batch, M, dtype, args):
    """Our numpy step (the CPU path of the estimators) at the same settings, on
    ``--cpu-threads`` threads, through the same training loop as the GPU side."""
    with threadpool_limits(args.cpu_threads):
        return time_our_step(X, y, Z, batch, args.cpu_steps, n_warmup=min(args.warmup, 2), xp=np,
                             dtype=dtype, **basis_settings("coupled", M))


def _step_row(dtype, M, batch, timings, bases, peer_modes):
    best = {name: 1e3 * min(t) if t else None for name, t in timings.items()}

    def ratio(a, b):
        return None if a is None or b is None else a / b

    ours = best.get("gpu:coupled")
    row = dict(dtype=dtype, M=M, batch=batch, ours_ms=ours,
               bases_ms={b: best.get(f"gpu:{b}") for b in bases},
               bases_ratio_vs_coupled={b: ratio(best.get(f"gpu:{b}"), ours) for b in bases if b != "coupled"},
               cpu_ms=best.get("cpu:coupled"), gpu_speedup_vs_cpu=ratio(best.get("cpu:coupled"), ours),
               medians_ms={name: [1e3 * s for s in t] for name, t in timings.items()})
    for mode in peer_modes:
        row[f"gpytorch_{mode}_ms"] = best.get(f"gpytorch:{mode}")
        row[f"ratio_vs_{mode}"] = ratio(ours, best.get(f"gpytorch:{mode}"))
    return row


# --------------------------------------------------------------------------------------
# d: accuracy on diamonds
# --------------------------------------------------------------------------------------
def _sklearn_kernel(name, d):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern

    if name == "rbf":
        return ConstantKernel() * RBF(np.ones(d))
    return ConstantKernel() * Matern(np.ones(d), nu=2.5)


def _fit_on(target, route, settings, X, y, dtype):
    """Fit ``SparseGPRegressor(**settings)`` on our GPU side.

    ``route="backend"``: numpy input and ``backend=<library>, dtype=<dtype>`` (the estimator
    moves the data to the GPU). ``route="dispatch"``: X and y converted to the library on
    the device beforehand and fitted under scikit-learn's ``array_api_dispatch`` (the route
    of ``--cpu-smoke``, where ``backend="torch"`` would look for CUDA).
    """
    import sklearn
    from skgp_sparse import SparseGPRegressor, backend

    if route == "backend":
        return SparseGPRegressor(backend=target.library, dtype=dtype, **settings).fit(X, y)
    float_dtype = getattr(target.xp, dtype)
    Xd, yd = (backend.to_namespace(a, target.xp, device=target.device, dtype=float_dtype) for a in (X, y))
    params = dict(settings)
    # Without the dtype option, float64 still runs on this route (the rows are fitted as
    # float64); float32 then fails below and is reported as skipped.
    if "dtype" in SparseGPRegressor().get_params():
        params["dtype"] = dtype
    elif dtype != "float64":
        raise NotImplementedError("SparseGPRegressor has no dtype option in this checkout")
    with sklearn.config_context(array_api_dispatch=True):
        return SparseGPRegressor(**params).fit(Xd, yd)


def _timed(fit, target):
    """``fit()``'s estimator and its seconds, the device synchronised before the clock is
    read, warnings silenced (the benchmark reports what the fit reached)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        reg = fit()
        target.sync()
        return reg, time.perf_counter() - start


def _test_scores(reg, Xt, yt, args):
    """Test RMSE and NLPD of the fitted regressor ``reg`` (predicting on the CPU side's threads)."""
    with threadpool_limits(args.cpu_threads):
        mean, std = reg.predict(Xt, return_std=True)
    return dict(rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, std**2))


def accuracy(target, args, errors):
    """Test RMSE/NLPD on diamonds of the numpy fit and of the GPU fits (float64, float32)."""
    from skgp_sparse import SparseGPRegressor

    X, Xt, y, yt = load_regression("diamonds", quick=args.quick)
    rows = []
    route = args.accuracy_route or ("backend" if target.on_gpu else "dispatch")
    for kernel in args.accuracy_kernels:
        for basis in args.accuracy_bases:
            # The CPU benchmark's settings: a fixed number of epochs, the stopping rule out of play.
            settings = dict(kernel=_sklearn_kernel(kernel, X.shape[1]), batch_size=args.accuracy_batch,
                            max_iter=args.epochs, tol=0.0, n_iter_no_change=10**6, random_state=0,
                            **basis_settings(basis, args.accuracy_m))
            runs = [("numpy", "float64", lambda s=settings: _cpu_fit(SparseGPRegressor(**s), X, y, args))]
            for dtype in args.dtypes:
                runs.append((target.library, dtype, lambda s=settings, dt=dtype: _fit_on(target, route, s, X, y, dt)))
            for lib, dtype, fit in runs:
                out = _attempt(errors, f"accuracy {basis} {kernel} {lib} {dtype}", lambda fit=fit: _timed(fit, target))
                if out is None:
                    continue
                reg, fit_s = out
                rows.append(dict(basis=basis, kernel=kernel, library=lib, dtype=dtype,
                                 route=None if lib == "numpy" else route, n_inducing=args.accuracy_m,
                                 epochs=reg.n_iter_, n_steps=reg.n_steps_, fit_s=fit_s,
                                 **_test_scores(reg, Xt, yt, args), elbo=float(reg.log_marginal_likelihood_value_),
                                 noise=float(reg.noise_variance_), kernel_fitted=str(reg.kernel_)))
                print(rows[-1], flush=True)
            target.free()
    return rows


def default_fits(target, args, errors):
    """e: the default regressor on ``--default-sets``, numpy against the GPU library.

    Every setting is the estimator's default (stopping rule, search, batch size, kernel) but
    ``backend`` and ``dtype``; the numpy fit runs on ``--cpu-threads`` threads and only on the
    sets named in ``--cpu-default-sets``. Rows give the fit's seconds, epochs, steps,
    ``converged_``, and test RMSE and NLPD beside the set's noise floor (synthetic sets).
    """
    from skgp_sparse import SparseGPRegressor

    rows = []
    route = args.accuracy_route or ("backend" if target.on_gpu else "dispatch")
    for name in args.default_sets:
        X, Xt, y, yt, info = load_regression(name, quick=args.quick, return_info=True)
        runs = [(target.library, dtype) for dtype in args.dtypes]
        if name in args.cpu_default_sets:
            runs.insert(0, ("numpy", "float64"))
        for lib, dtype in runs:
            if lib == "numpy":
                fit = lambda: _cpu_fit(SparseGPRegressor(), X, y, args)  # noqa: E731
            else:
                fit = lambda dtype=dtype: _fit_on(target, route, {}, X, y, dtype)  # noqa: E731
            out = _attempt(errors, f"default {name} {lib} {dtype}", lambda fit=fit: _timed(fit, target))
            if out is None:
                continue
            reg, fit_s = out
            rows.append(dict(data=name, n_train=len(X), library=lib, dtype=dtype, fit_s=fit_s, epochs=reg.n_iter_,
                             n_steps=reg.n_steps_, converged=bool(reg.converged_), **_test_scores(reg, Xt, yt, args),
                             floor_rmse=None if info is None else info["noise_floor_rmse"],
                             floor_nlpd=None if info is None else info["nlpd_floor"]))
            print(rows[-1], flush=True)
            target.free()
    return rows


def _cpu_fit(reg, X, y, args):
    with threadpool_limits(args.cpu_threads):
        return reg.fit(X, y)


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------
def _ms(v):
    return "-" if v is None else f"{v:.2f}"


def _x(v):
    return "-" if v is None else f"{v:.2f}"


def markdown(results):
    meta = results.get("meta", {})
    lib = meta.get("library", "cupy")
    lines = [f"GPU: **{meta.get('gpu')}** (ours on {lib}, GPyTorch on torch {meta.get('versions', {}).get('torch')}); "
             f"CPU side: {meta.get('cpu_threads')} threads of {meta.get('machine')}", ""]
    steps = results.get("steps") or []
    modes = meta.get("peer_modes", ["ngd"])
    if steps:
        head = "| dtype | M | batch | ours ms | " + " | ".join(f"GPyTorch {m.upper()} ms | ours / {m.upper()}" for m in modes)
        lines += [head + " |", "|" + "---|" * (4 + 2 * len(modes))]
        for r in steps:
            cells = " | ".join(f"{_ms(r.get(f'gpytorch_{m}_ms'))} | {_x(r.get(f'ratio_vs_{m}'))}" for m in modes)
            lines.append(f"| {r['dtype']} | {r['M']} | {r['batch']} | {_ms(r['ours_ms'])} | {cells} |")
        lines.append("")
        others = [b for b in OTHER_BASES if any(b in r["bases_ms"] for r in steps)]
        lines += ["| dtype | M | batch | coupled ms | " + " | ".join(f"{b} ms (/ coupled)" for b in others) + " |",
                  "|" + "---|" * (4 + len(others))]
        for r in steps:
            cells = " | ".join(f"{_ms(r['bases_ms'].get(b))} ({_x(r['bases_ratio_vs_coupled'].get(b))})" for b in others)
            lines.append(f"| {r['dtype']} | {r['M']} | {r['batch']} | {_ms(r['ours_ms'])} | {cells} |")
        lines.append("")
        lines += ["| dtype | M | batch | numpy (CPU) ms | GPU ms | GPU speed-up |", "|---|---|---|---|---|---|"]
        for r in steps:
            lines.append(f"| {r['dtype']} | {r['M']} | {r['batch']} | {_ms(r['cpu_ms'])} | {_ms(r['ours_ms'])} | "
                         f"{_x(r['gpu_speedup_vs_cpu'])} |")
        lines.append(f"(CPU side: M <= {meta.get('cpu_max_m')}, {meta.get('cpu_steps')} steps; '-': not run)")
        lines.append("")
    acc = results.get("accuracy") or []
    if acc:
        lines += ["| basis | kernel | library | dtype | epochs | fit s | test RMSE | test NLPD | ELBO |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in acc:
            lines.append(f"| {r['basis']} | {r['kernel']} | {r['library']} | {r['dtype']} | {r['epochs']} | "
                         f"{r['fit_s']:.1f} | {r['rmse']:.4f} | {r['nlpd']:.3f} | {r['elbo']:.6g} |")
        lines.append("")
    defaults = results.get("defaults") or []
    if defaults:
        lines += ["| data | rows | library | dtype | fit s | epochs | steps | converged | test RMSE | test NLPD "
                  "| floor RMSE | floor NLPD |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in defaults:
            floor = ("-", "-") if r["floor_rmse"] is None else (f"{r['floor_rmse']:.4f}", f"{r['floor_nlpd']:.3f}")
            lines.append(f"| {r['data']} | {r['n_train']:,} | {r['library']} | {r['dtype']} | {r['fit_s']:.1f} | "
                         f"{r['epochs']} | {r['n_steps']} | {r['converged']} | {r['rmse']:.4f} | {r['nlpd']:.3f} | "
                         f"{floor[0]} | {floor[1]} |")
        lines.append("")
    skipped = results.get("skipped") or {}
    if skipped:
        lines.append("Skipped (did not run in this checkout or on this machine):")
        lines += [f"- {k}: {v}" for k, v in skipped.items()]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", choices=["cupy", "torch"], default="cupy", help="array library of our GPU side")
    parser.add_argument("--device", default="cuda", help="cuda or cuda:<i> (default cuda)")
    parser.add_argument("--only", choices=["steps", "accuracy", "defaults"], default=None)
    parser.add_argument("--quick", action="store_true", help="GPU smoke run: tiny grid and data")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="no GPU needed: ours and GPyTorch on torch CPU, tiny grid (checks the script only)")
    parser.add_argument("--n-steps", type=int, default=30, help="timed steps per timing")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the best median counts")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "float64"], default=["float32", "float64"])
    parser.add_argument("--peer-modes", nargs="+", choices=["ngd", "adam"], default=["ngd"],
                        help="GPyTorch training modes to time (ngd: natural gradients on q + Adam)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads of the peer")
    parser.add_argument("--cpu-threads", type=int, default=None, help="BLAS threads of our CPU side (default: all)")
    parser.add_argument("--cpu-max-m", type=int, default=1024, help="largest M timed on the CPU (c)")
    parser.add_argument("--cpu-steps", type=int, default=10, help="timed CPU steps per timing (c)")
    parser.add_argument("--epochs", type=int, default=25, help="accuracy: epochs (max_iter)")
    parser.add_argument("--accuracy-bases", nargs="+", default=["coupled"])
    parser.add_argument("--accuracy-kernels", nargs="+", choices=["matern52", "rbf"], default=["matern52"])
    parser.add_argument("--accuracy-route", choices=["backend", "dispatch"], default=None,
                        help="backend: numpy input and backend=<library> (default on a GPU); dispatch: "
                             "arrays of the library under array_api_dispatch (default with --cpu-smoke)")
    parser.add_argument("--default-sets", nargs="+", default=["diamonds", "friedman1"],
                        help="e: sets of the whole default fits")
    parser.add_argument("--cpu-default-sets", nargs="+", default=["diamonds"],
                        help="e: sets whose default fit also runs on numpy (the CPU)")
    args = parser.parse_args()

    grid = [(M, b) for M in (256, 1024, 4096) for b in (1024, 8192)]
    args.accuracy_m, args.accuracy_batch = 256, 1024
    results_dir, name = RESULTS_DIR, "gpu.json"
    if args.cpu_smoke:
        args.library, args.device, args.quick = "torch", "cpu", True
        args.cpu_threads = args.cpu_threads or 2
        name = "gpu_cpu_smoke.json"
    if args.quick:
        grid = [(32, 256), (64, 512)]
        args.n_steps, args.warmup, args.repeats, args.cpu_steps, args.epochs = 3, 1, 1, 3, 2
        args.accuracy_m, args.accuracy_batch = 32, 512
        results_dir = RESULTS_DIR / "quick"

    target = Target(args.library, args.device)
    importlib.import_module("gpytorch")  # fail before any timing when the peer is missing

    results = {"meta": dict(gpu=target.name, library=args.library, device=args.device, cpu_smoke=args.cpu_smoke,
                            quick=args.quick, machine=platform.platform(), cpu_count=os.cpu_count(),
                            cpu_threads=args.cpu_threads, cpu_max_m=args.cpu_max_m, cpu_steps=args.cpu_steps,
                            threads=args.threads, n_steps=args.n_steps, warmup=args.warmup, repeats=args.repeats,
                            peer_modes=args.peer_modes, grid=grid, dtypes=args.dtypes, versions=installed_versions("cupy", "torch", "gpytorch", "array_api_compat", "sklearn"),
                            date=time.strftime("%Y-%m-%dT%H:%M:%S"))}
    print(f"GPU: {target.name}", flush=True)
    skipped = {}
    if args.only in (None, "steps"):
        X, _, y, _ = load_regression("diamonds", quick=args.quick)
        results["steps"], errors = step_times(X, y, target, args, grid, args.dtypes)
        skipped.update(errors)
    if args.only in (None, "accuracy"):
        results["accuracy"] = accuracy(target, args, skipped)
    if args.only in (None, "defaults"):
        results["defaults"] = default_fits(target, args, skipped)
    results["skipped"] = skipped

    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / name
    # A partial run (--only) keeps the other section of the previous results.
    previous = json.loads(path.read_text()) if path.exists() else {}
    results = {**previous, **results}
    path.write_text(json.dumps(results, indent=2, default=float))
    print(markdown(results))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
