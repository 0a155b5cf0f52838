"""When a minibatch fit stops: the ELBO's trend over windows of steps, not one epoch's dip."""

import numpy as np


class StoppingRule:
    """Decide convergence from the minibatch ELBO estimates of a fit.

    The estimates are averaged over *periods* of ``period_steps`` consecutive steps. The
    rule compares the mean ELBO per row of the last ``window`` periods with that of the
    ``window`` periods before them: the fit has converged when the later window is higher
    by less than ``tol`` nats per row per ``span_steps`` steps of training between them.
    Averaging over whole windows is what keeps one noisy or dipping period from stopping
    a fit that is still climbing, and a slow steady climb (less than ``tol`` per period
    but more than ``tol`` per span) from looking flat.

    Parameters
    ----------
    tol : float
        Rise of the ELBO per row, per span, below which the fit has converged.
    window : int
        Periods per window; the rule can fire after ``2 * window`` periods.
    period_steps : int
        Steps per period.
    span_steps : float
        Steps over which a rise is compared with ``tol`` (the estimators use one epoch,
        but no more than 100 steps: on large data the hyperparameters settle within a
        fraction of an epoch, and a rise per epoch would keep them going for epochs).

    Attributes
    ----------
    period_means : list of float
        ELBO per row of each completed period (see :meth:`add`).
    """

    def __init__(self, tol, window, period_steps, span_steps):
        self.tol = float(tol)
        self.window = int(window)
        self.period_steps = max(int(period_steps), 1)
        self.spans_per_period = self.period_steps / max(float(span_steps), 1.0)
        self.period_means = []
        self._total = 0.0
        self._count = 0

    def add(self, elbo_per_row, monitor=None):
        """Record one step's ELBO estimate per row.

        ``monitor``, if given, is called when the step closes a period and its value (the
        ELBO per row on a fixed set of rows, at the current parameters) stands for the
        period instead of the mean of its minibatch estimates: it moves only as the
        parameters do, not with the draw of the minibatches.

        Returns
        -------
        bool
            Whether this step closed a period.
        """
        self._total += elbo_per_row
        self._count += 1
        if self._count < self.period_steps:
            return False
        self.period_means.append(self._total / self._count if monitor is None else monitor())
        self._total, self._count = 0.0, 0
        return True

    def rise_per_span(self):
        """Rise per span between the last two windows (None before there are two)."""
        w = self.window
        if len(self.period_means) < 2 * w:
            return None
        means = np.asarray(self.period_means[-2 * w :])
        return (means[w:].mean() - means[:w].mean()) / (w * self.spans_per_period)

    def converged(self):
        rise = self.rise_per_span()
        return rise is not None and rise < self.tol
