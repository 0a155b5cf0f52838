"""Where a GPU training step spends its time: ours (CuPy, PyTorch) against GPyTorch's.

For each (basis, M, batch, dtype) asked for, runs ``--n-steps`` training steps of each
contender under ``torch.profiler`` (CUPTI sees every CUDA kernel of the process, CuPy's
included) and prints, per step:

- wall milliseconds (the median step, device synchronised around each);
- GPU busy milliseconds (the sum of the kernels' own times) and the number of kernels;
- host-device copies and synchronisations (the CUDA runtime calls that stall the host);
- the kernels that took the most time.

A step whose wall time is far above its GPU busy time is bound by launches and host syncs,
not by arithmetic: that is what this script is for (issue 26, "where the time goes").

    python benchmarks/profile_gpu_step.py                          # coupled, M 1024, batch 1024
    python benchmarks/profile_gpu_step.py --grid 256:1024 4096:8192 --dtypes float32 float64
    python benchmarks/profile_gpu_step.py --cpu-smoke              # no GPU: checks the script

Needs a CUDA build of PyTorch, and CuPy for the ``cupy`` contender; GPyTorch for the peer.
"""

import os

os.environ.setdefault("SCIPY_ARRAY_API", "1")

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402


from _data import init_inducing, load_regression  # noqa: E402
from _ours import basis_settings, time_our_step  # noqa: E402

RESULTS_DIR = Path(__file__).parent / "results"
#: CUDA runtime calls that make the host wait for the device or move data across.
STALLS = ("cudaMemcpy", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize",
          "cudaEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoHAsync", "cuMemcpyHtoDAsync",
          "cuStreamSynchronize", "cuCtxSynchronize")


def _ours_on(name, device):
    """The namespace and device of our step on library ``name`` ("cupy": its current device)."""
    from skgp_sparse import backend

    if name == "cupy":
        import cupy

        return backend.namespace(cupy.empty(0)), None
    import torch

    return backend.namespace(torch.empty(0)), torch.device(device)


def _contenders(names, X, y, Z, batch, dtype, args, basis):
    """name -> callable that runs ``args.n_steps`` steps and returns the median step's seconds."""
    out = {}
    device = "cpu" if args.cpu_smoke else "cuda"
    for name in names:
        if name == "gpytorch":
            from _gpytorch_peer import time_gpytorch_step

            out[name] = lambda: time_gpytorch_step(X, y, Z, batch, args.n_steps, mode="ngd", n_warmup=0,
                                                   threads=args.threads, device=device, dtype=dtype)
        else:
            xp, dev = _ours_on(name, device)
            out[name] = lambda xp=xp, dev=dev: time_our_step(X, y, Z, batch, args.n_steps, n_warmup=0, xp=xp,
                                                             device=dev, dtype=dtype, **basis_settings(basis, args.M))
    return out


def _summary(prof, n_steps, median_s, top):
    """Per-step figures of one profiled run of ``n_steps`` steps whose median took ``median_s``.

    The kernel and stall counts cover the whole run, its setup included (the data's one copy
    to the device, the model's first state), divided by ``n_steps``.
    """
    from torch.autograd import DeviceType

    kernels, busy_us, stalls = 0, 0.0, {}
    rows = []
    for avg in prof.key_averages():
        if avg.device_type == DeviceType.CUDA:
            self_us = getattr(avg, "self_device_time_total", None)
            if self_us is None:
                self_us = avg.self_cuda_time_total
            kernels += avg.count
            busy_us += self_us
            rows.append((self_us, avg.count, avg.key))
        elif avg.key in STALLS:
            stalls[avg.key] = stalls.get(avg.key, 0) + avg.count
    rows.sort(reverse=True)
    return dict(wall_ms=1e3 * median_s, gpu_busy_ms=1e-3 * busy_us / n_steps, kernels=kernels / n_steps,
                stalls={k: v / n_steps for k, v in stalls.items()},
                top=[dict(ms_per_step=1e-3 * us / n_steps, launches_per_step=c / n_steps, kernel=k[:90])
                     for us, c, k in rows[:top]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contenders", nargs="+", default=["cupy", "torch", "gpytorch"])
    parser.add_argument("--bases", nargs="+", default=["coupled"])
    parser.add_argument("--grid", nargs="+", default=["1024:1024"], help="M:batch pairs")
    parser.add_argument("--dtypes", nargs="+", default=["float64"])
    parser.add_argument("--n-steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--cpu-smoke", action="store_true", help="torch on the CPU, tiny grid (checks the script)")
    args = parser.parse_args()
    from torch.profiler import ProfilerActivity, profile

    if args.cpu_smoke:
        args.contenders = [c for c in args.contenders if c != "cupy"]
        args.grid, args.n_steps = ["32:256"], 3
    activities = [ProfilerActivity.CPU] + ([] if args.cpu_smoke else [ProfilerActivity.CUDA])
    X, _, y, _ = load_regression("diamonds", quick=args.cpu_smoke)
    results = []
    for dtype in args.dtypes:
        for pair in args.grid:
            args.M, batch = (int(v) for v in pair.split(":"))
            for basis in args.bases:
                Z = init_inducing(X, args.M + basis_settings(basis, args.M)["n_orthogonal"], random_state=0)
                names = [c for c in args.contenders if basis == "coupled" or c != "gpytorch"]
                for name, run in _contenders(names, X, y, Z, batch, dtype, args, basis).items():
                    run()  # warm-up: compilation, handles, allocator pools
                    with profile(activities=activities) as prof:
                        median = run()
                    row = dict(contender=name, basis=basis, M=args.M, batch=batch, dtype=dtype,
                               **_summary(prof, args.n_steps, median, args.top))
                    results.append(row)
                    print(f"\n## {name} {basis} M={args.M} batch={batch} {dtype}: wall {row['wall_ms']:.2f} ms/step, "
                          f"GPU busy {row['gpu_busy_ms']:.2f} ms/step, {row['kernels']:.0f} kernels/step, "
                          f"stalls/step {row['stalls']}", flush=True)
                    for t in row["top"]:
                        print(f"  {t['ms_per_step']:8.3f} ms  x{t['launches_per_step']:5.1f}  {t['kernel']}")
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / ("quick/profile_gpu_smoke.json" if args.cpu_smoke else "profile_gpu.json")
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=float))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
