"""When a minibatch fit stops: the ELBO's trend over windows of steps, not one epoch's dip."""

import numpy as np


class StoppingRule:
    """Decide convergence from the minibatch ELBO estimates of a fit.

    The estimates are averaged over *periods* of ``period_steps`` consecutive steps (at
    most one epoch). The rule compares the mean ELBO per row of the last ``window``
    periods with that of the ``window`` periods before them: the fit has converged when
    the later window is higher by less than ``tol`` nats per row per epoch of training
    between them. Averaging over whole windows is what keeps one noisy or dipping period
    from stopping a fit that is still climbing, and a slow steady climb (less than ``tol``
    per period but more than ``tol`` per epoch) from looking flat.

    Parameters
    ----------
    tol : float
        Rise of the ELBO per row, per epoch, below which the fit has converged.
    window : int
        Periods per window; the rule can fire after ``2 * window`` periods.
    period_steps : int
        Steps per period.
    steps_per_epoch : float
        Steps in one pass over the data (converts the rise per period into per epoch).

    Attributes
    ----------
    period_means : list of float
        Mean ELBO per row of each completed period.
    """

    def __init__(self, tol, window, period_steps, steps_per_epoch):
        self.tol = float(tol)
        self.window = int(window)
        self.period_steps = max(int(period_steps), 1)
        self.epochs_per_period = self.period_steps / max(float(steps_per_epoch), 1.0)
        self.period_means = []
        self._total = 0.0
        self._count = 0

    def add(self, elbo_per_row):
        """Record one step's ELBO estimate per row.

        Returns
        -------
        bool
            Whether this step closed a period.
        """
        self._total += elbo_per_row
        self._count += 1
        if self._count < self.period_steps:
            return False
        self.period_means.append(self._total / self._count)
        self._total, self._count = 0.0, 0
        return True

    def rise_per_epoch(self):
        """Rise per epoch between the last two windows (None before there are two)."""
        w = self.window
        if len(self.period_means) < 2 * w:
            return None
        means = np.asarray(self.period_means[-2 * w :])
        return (means[w:].mean() - means[:w].mean()) / (w * self.epochs_per_period)

    def converged(self):
        rise = self.rise_per_epoch()
        return rise is not None and rise < self.tol
