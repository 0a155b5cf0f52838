"""One classifier training step, ours against GPyTorch's SVGP classifier: two classes and many.

The regressor's step has had its ratio to GPyTorch's measured since the first benchmarks
(``bench_regression.py --only steps``); the classifier's had not, and a many-class fit got
1.65x slower between two commits without a benchmark noticing (issue 35). This script
measures the classifier's step beside GPyTorch's in one process, so that a change to it
shows as a changed ratio:

* ours: ``SparseGPClassifier`` (coupled basis, the default likelihoods: probit Bernoulli for
  two classes, one latent GP per class with the default many-class likelihood for more, their
  q(u) sharing one covariance unless ``--class-covariance per_class``), one step = ELBO and
  gradients on a minibatch, the natural step on q(u), Adam on the rest;
* GPyTorch: its SVGP classifier as in its examples, Cholesky q(u), Adam (lr 0.01) on
  everything; ``BernoulliLikelihood`` for two classes, C independent latent GPs with a
  ``SoftmaxLikelihood`` (no mixing) for C > 2. Inducing inputs shared by the classes, as ours.

Same synthetic rows (4 standard normal features, labels from the first feature's quantiles),
M, batch, float64 and threads; median of ``--n-steps`` steps after 3 warm-ups, the two
libraries interleaved ``--repeats`` times and the best median of each kept. Our model is
taken from a one-epoch fit (its search included), so its state is a trained one.

    python benchmarks/bench_classifier_steps.py                         # this checkout
    python benchmarks/bench_classifier_steps.py --checkout /tmp/base    # another checkout

``--checkout`` puts that directory first on ``sys.path``, so the ratios of two commits are
compared by running the script (from either) once per checkout, alternately::

    git worktree add /tmp/base <rev>
    for c in /tmp/base "$PWD" /tmp/base "$PWD"; do python benchmarks/bench_classifier_steps.py --checkout $c; done

Results: ``--out`` (default ``benchmarks/results/classifier_steps.json``) and a Markdown
table on stdout. Needs ``pip install torch==2.13.0 gpytorch`` (the CPU wheel first).
"""

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def labels(X, n_classes):
    """Class labels 0..C-1 from the first feature's quantiles (balanced classes)."""
    edges = np.quantile(X[:, 0], np.linspace(0.0, 1.0, n_classes + 1)[1:-1])
    return np.digitize(X[:, 0], edges)


def time_ours(X, y, Z0, batch, n_steps, n_warmup=3, seed=0, params=None):
    """Median seconds of our classifier's training step (see the module's docstring);
    ``params``: more parameters of the classifier."""
    from skgp_sparse import SparseGPClassifier
    from skgp_sparse.optim.adam import Adam
    from skgp_sparse.optim.natural import NaturalStepSchedule

    est = SparseGPClassifier(n_inducing=len(Z0), inducing_init=Z0, batch_size=batch, max_iter=1,
                             random_state=seed, **(params or {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one epoch does not converge; that is not measured
        est.fit(X, y)
    n = X.shape[0]
    model = est._fitted_model(n)
    Y = est._bound_targets(y).reshape(n, -1)
    schedule = NaturalStepSchedule(est.natural_step_size, conjugate=False, full_batch=False)
    adam = Adam(est.learning_rate)
    order = np.random.default_rng(seed).permutation(n)
    times = []
    for s in range(n_warmup + n_steps):
        rows = np.sort(np.roll(order, -s * batch)[:batch])
        start = time.perf_counter()
        result = model.evaluate(X[rows], Y[rows])
        new_state, _ = schedule.apply(lambda size: model.natural_step(result, size))
        new_params = adam.step(model.adam_params(), result.grads, model.adam_bounds())
        model.state = new_state
        model.set_adam_params(new_params)
        if s >= n_warmup:
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def time_gpytorch(X, y, Z0, batch, n_steps, threads, n_warmup=3, seed=0):
    """Median seconds of GPyTorch's classifier step (see the module's docstring)."""
    import gpytorch
    import torch
    from gpytorch.distributions import MultivariateNormal
    from gpytorch.kernels import RBFKernel, ScaleKernel
    from gpytorch.likelihoods import BernoulliLikelihood, SoftmaxLikelihood
    from gpytorch.means import ZeroMean
    from gpytorch.models import ApproximateGP
    from gpytorch.variational import (CholeskyVariationalDistribution, IndependentMultitaskVariationalStrategy,
                                      VariationalStrategy)

    n_classes = int(y.max()) + 1
    latents = 1 if n_classes == 2 else n_classes
    shape = torch.Size([]) if latents == 1 else torch.Size([latents])

    class Classifier(ApproximateGP):
        def __init__(self, Z):
            q_u = CholeskyVariationalDistribution(Z.shape[0], batch_shape=shape)
            strategy = VariationalStrategy(self, Z, q_u, learn_inducing_locations=True)
            if latents > 1:
                strategy = IndependentMultitaskVariationalStrategy(strategy, num_tasks=latents)
            super().__init__(strategy)
            self.mean_module = ZeroMean(batch_shape=shape)
            self.covar_module = ScaleKernel(RBFKernel(ard_num_dims=Z.shape[1], batch_shape=shape), batch_shape=shape)

        def forward(self, x):
            return MultivariateNormal(self.mean_module(x), self.covar_module(x))

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = torch.as_tensor(y, dtype=torch.float64 if latents == 1 else torch.long)
    model = Classifier(torch.as_tensor(Z0, dtype=torch.float64)).double()
    likelihood = (BernoulliLikelihood() if latents == 1 else
                  SoftmaxLikelihood(num_features=latents, num_classes=n_classes, mixing_weights=False)).double()
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=X.shape[0])
    optimizer = torch.optim.Adam([{"params": model.parameters()}, {"params": likelihood.parameters()}], lr=0.01)
    model.train()
    likelihood.train()
    order = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(seed))
    times = []
    for s in range(n_warmup + n_steps):
        idx = torch.roll(order, -s * batch)[:batch]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = -elbo(model(Xt[idx]), yt[idx])
        loss.backward()
        optimizer.step()
        if s >= n_warmup:
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", type=Path, default=HERE.parent,
                        help="repository whose skgp_sparse is measured (default: this one)")
    parser.add_argument("--classes", type=int, nargs="+", default=[2, 10, 26])
    parser.add_argument("--n-inducing", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--class-covariance", default=None,
                        help="the classifier's class_covariance (default: its own default; a checkout "
                             "before commit 5e329eb has no such parameter)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "classifier_steps.json")
    args = parser.parse_args()

    sys.path.insert(0, str(args.checkout.resolve()))
    import skgp_sparse
    from threadpoolctl import threadpool_limits

    if not Path(skgp_sparse.__file__).resolve().is_relative_to(args.checkout.resolve()):
        raise RuntimeError(f"imported {skgp_sparse.__file__}, not the checkout {args.checkout}")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.rows, 4))
    Z0 = X[np.sort(rng.choice(args.rows, args.n_inducing, replace=False))]
    params = {} if args.class_covariance is None else {"class_covariance": args.class_covariance}
    rows = []
    for n_classes in args.classes:
        y = labels(X, n_classes)
        ours, peer = [], []
        for _ in range(args.repeats):  # interleaved: a change of load hits both
            with threadpool_limits(args.threads):
                ours.append(time_ours(X, y, Z0, args.batch_size, args.n_steps, params=params))
                peer.append(time_gpytorch(X, y, Z0, args.batch_size, args.n_steps, args.threads))
        rows.append(dict(classes=n_classes, ours_ms=1e3 * min(ours), gpytorch_ms=1e3 * min(peer),
                         ratio=min(ours) / min(peer)))
        print(rows[-1], flush=True)
    print(f"\ncheckout {args.checkout}, M = {args.n_inducing}, batch {args.batch_size}, {args.threads} thread(s)")
    print("| classes | ours ms | GPyTorch ms | ours / GPyTorch |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['classes']} | {r['ours_ms']:.1f} | {r['gpytorch_ms']:.1f} | {r['ratio']:.2f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(machine=platform.platform(), checkout=str(args.checkout), params=params, n_inducing=args.n_inducing,
                batch_size=args.batch_size, rows=args.rows, threads=args.threads, n_steps=args.n_steps,
                repeats=args.repeats, date=time.strftime("%Y-%m-%dT%H:%M:%S"))
    args.out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
