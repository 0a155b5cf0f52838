"""Host reads and copies from host data per training step of a whole torch fit (issue 34).

Fits ``SparseGPRegressor`` with its defaults (``max_iter`` aside) on torch CPU tensors under
scikit-learn's ``array_api_dispatch`` and counts, within the training loop only (the
minibatch steps, their checks and any replays; not the exact search before it nor the
settling after it), every operation that makes the host wait for a device value or copies
host data to the device:

* reads: ``aten._local_scalar_dense`` (``float``, ``bool``, ``int`` of a tensor),
  ``aten.item``, ``aten.is_nonzero``, ``aten.nonzero`` (a data-dependent shape) and
  ``Tensor.numpy`` (a whole array back to the host);
* copies from host data: ``aten.lift_fresh`` / ``lift_fresh_copy`` (``torch.tensor(...)``
  or ``asarray`` of host values);
* boolean assignments: ``aten.index_put_`` with a boolean mask (a data-dependent scatter);

and, beside them, the M x M arrays a step makes (operations whose output's last two axes
are the fit's (M, M), views excepted): each is a launch and a pass over M^2 entries.

On a CPU these are free; on a GPU each read is a stream synchronisation and each copy a
pageable transfer, which is why they are counted.

    OMP_NUM_THREADS=1 python benchmarks/count_host_reads.py            # 60,000 rows, 3 epochs
    OMP_NUM_THREADS=1 python benchmarks/count_host_reads.py --rows 6000 --epochs 1 --where
    OMP_NUM_THREADS=1 python benchmarks/count_host_reads.py --time-only   # the loop's time per step
    OMP_NUM_THREADS=1 python benchmarks/count_host_reads.py --classes 2   # the classifier (2 or more classes)
    OMP_NUM_THREADS=1 python benchmarks/count_host_reads.py --basis solve  # another basis

Prints one JSON object: steps, counts per kind, the total per step, and the M x M arrays
a step.
"""

import argparse
import collections
import json
import os
import sys
import time
import traceback
import warnings

os.environ.setdefault("SCIPY_ARRAY_API", "1")

import numpy as np
import sklearn
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

READS = {"aten._local_scalar_dense.default", "aten.item.default", "aten.is_nonzero.default",
         "aten.nonzero.default"}
HOST_COPIES = {"aten.lift_fresh.default", "aten.lift_fresh_copy.default"}


def _where(stack):
    """The innermost frame of skgp_sparse in ``stack``, as ``path:line function``."""
    frames = [f for f in stack if "skgp_sparse" in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.split('skgp_sparse/')[-1]}:{f.lineno} {f.name}"


class HostTraffic(TorchDispatchMode):
    """Counts reads, copies from host data and boolean assignments (with their place
    in skgp_sparse when ``where``)."""

    def __init__(self, where=False, m=None):
        super().__init__()
        self.counts = collections.Counter()
        self.places = collections.Counter()
        self.where = where
        self.m = m
        self.mm_arrays = 0

    def _count(self, kind):
        self.counts[kind] += 1
        if self.where:
            self.places[(kind, _where(traceback.extract_stack()[:-2]))] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in READS:
            self._count("reads")
        elif name in HOST_COPIES:
            self._count("copies from host data")
        elif name.startswith("aten.index_put") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ())):
            self._count("boolean assignments")
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and tuple(out.shape[-2:]) == (self.m, self.m) and not func.is_view:
            self.mm_arrays += 1
        return out


class NumpyCalls(TorchFunctionMode):
    """Counts ``Tensor.numpy`` (a device-to-host copy of a whole array) into ``traffic``."""

    def __init__(self, traffic):
        super().__init__()
        self.traffic = traffic

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.numpy:
            self.traffic._count("reads")
        return func(*args, **(kwargs or {}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--features", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--where", action="store_true", help="also list where each one happens")
    parser.add_argument("--basis", default="coupled", help="the estimator's basis")
    parser.add_argument("--classes", type=int, default=0,
                        help="fit SparseGPClassifier on this many classes (quantiles of the regression target) "
                             "instead of the regressor")
    parser.add_argument("--time-only", action="store_true",
                        help="count nothing: time the training loop (ms per step, torch on one thread)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    from skgp_sparse import SparseGPClassifier, SparseGPRegressor
    from skgp_sparse.fit import training

    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.rows, args.features))
    y = np.sin(X.sum(axis=1)) + 0.1 * rng.normal(size=args.rows)
    if args.classes:
        y = np.digitize(y, np.quantile(y, np.linspace(0, 1, args.classes + 1)[1:-1]))
        estimator = SparseGPClassifier(basis=args.basis, max_iter=args.epochs, random_state=0)
    else:
        estimator = SparseGPRegressor(basis=args.basis, max_iter=args.epochs, random_state=0)
    traffic = HostTraffic(args.where, m=estimator.n_inducing)
    runs = []
    original_train = training.train

    seconds = []

    def counted_train(*a, **k):
        if args.time_only:
            start = time.perf_counter()
            history = original_train(*a, **k)
            seconds.append(time.perf_counter() - start)
        else:
            with traffic, NumpyCalls(traffic):
                history = original_train(*a, **k)
        runs.append(history.n_steps)
        return history

    training.train = counted_train
    try:
        with sklearn.config_context(array_api_dispatch=True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(torch.from_numpy(X), torch.from_numpy(y))
    finally:
        training.train = original_train
    steps = sum(runs)
    if args.time_only:
        print(json.dumps({"skgp_sparse": sys.modules["skgp_sparse"].__file__, "steps": steps,
                          "ms_per_step": round(1000 * sum(seconds) / steps, 1)}))
        return
    out = {"skgp_sparse": sys.modules["skgp_sparse"].__file__, "rows": args.rows, "epochs": args.epochs,
           "steps": steps, "counts": dict(traffic.counts),
           "per_step": {k: round(v / steps, 3) for k, v in traffic.counts.items()},
           "total_per_step": round(sum(traffic.counts.values()) / steps, 3),
           "n_inducing": estimator.n_inducing, "mm_arrays_per_step": round(traffic.mm_arrays / steps, 1)}
    if args.where:
        out["places_per_step"] = {f"{kind} {place}": round(c / steps, 3)
                                  for (kind, place), c in traffic.places.most_common()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
