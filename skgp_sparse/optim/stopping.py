"""When a minibatch fit stops: the ELBO's trend over windows of steps, not one epoch's dip,
and no steady pull on the hyperparameters."""

import numpy as np

#: The hyperparameters have settled when no coordinate of their minibatch gradient pulls
#: one way: a mean over the last window of more than this many standard errors from zero,
#: and steeper than ``tol`` nats per row per unit of the log-parameter (a steady pull that
#: steep is a rise of more than ``tol`` per row still to be had). Where Adam wanders about
#: an optimum its steps average out, so does the gradient that drives them, and each
#: coordinate's ratio is of order one; on a plateau the gradient pulls one way (it is why
#: the parameters move), and over a window of hundreds of steps its mean stands out of the
#: noise however slowly the ELBO rises. The slope keeps out the length scale of a feature
#: the data do not use, which drifts towards its bound for ever with a steady but vanishing
#: gradient, many standard errors from zero (docs/constants.md).
MAX_GRADIENT_SNR = 4.0

#: A pull is a curved ridge, not a plateau, when Adam follows it and the ELBO does not:
#: the rise per span is below this share of what the pull promises to first order (its
#: coordinates' mean gradients times the distance Adam's steps can move each in a span).
#: Along the ridge towards the RBF kernel's long-length-scale limit the amplitude and the
#: length scales drift together; each step's first-order gain is eaten by the ridge's
#: curvature, and without this test such a fit runs to ``max_iter`` (docs/constants.md).
RIDGE_SHARE = 0.25


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
    max_gradient_snr : float or None
        When steps report the gradient of the hyperparameters (see :meth:`add`), the fit
        has also converged only when no coordinate's mean over the last window is both
        more than this many standard errors from zero and larger than ``tol`` (see
        :data:`MAX_GRADIENT_SNR`). None:
        the gradient is not read (full-batch steps: their gradient has no noise to
        measure against, and their ELBO no noise to hide a rise).
    reach_per_span : float or None
        How far (log-parameter units) the optimiser's steps can move a hyperparameter in
        one span: Adam's learning rate times ``span_steps``. Given, a pull is let go once
        the ELBO rises by less than :data:`RIDGE_SHARE` of what it promises over that
        reach (see :meth:`pull_pays`). None: every pull holds the fit.

    Attributes
    ----------
    period_means : list of float
        ELBO per row of each completed period (see :meth:`add`).
    period_gradients : list of tuple
        ``(sum, sum of squares, steps)`` of the hyperparameter gradient over each completed
        period (empty when steps report none).
    """

    def __init__(self, tol, window, period_steps, span_steps, max_gradient_snr=MAX_GRADIENT_SNR,
                 reach_per_span=None):
        self.tol = float(tol)
        self.reach_per_span = None if reach_per_span is None else float(reach_per_span)
        self.window = int(window)
        self.period_steps = max(int(period_steps), 1)
        self.spans_per_period = self.period_steps / max(float(span_steps), 1.0)
        self.max_gradient_snr = None if max_gradient_snr is None else float(max_gradient_snr)
        self.period_means = []
        self.period_gradients = []
        self._total = 0.0
        self._count = 0
        self._gradient_sums = None

    @property
    def reads_gradient(self):
        """Whether :meth:`add` uses a step's hyperparameter gradient (so that a caller
        need not compute one for a rule that would drop it)."""
        return self.max_gradient_snr is not None

    def add(self, elbo_per_row, monitor=None, gradient=None):
        """Record one step's ELBO estimate per row (and its hyperparameter gradient).

        ``monitor``, if given, is called when the step closes a period and its value (the
        ELBO per row on a fixed set of rows, at the current parameters) stands for the
        period instead of the mean of its minibatch estimates: it moves only as the
        parameters do, not with the draw of the minibatches. ``gradient``, if given, is
        the step's minibatch gradient per row of the hyperparameters as one vector (zero
        where a parameter rests on a bound): see :meth:`gradient_snr`.

        Returns
        -------
        bool
            Whether this step closed a period.
        """
        self._total += elbo_per_row
        self._count += 1
        if gradient is not None and self.reads_gradient:
            g = np.asarray(gradient, dtype=np.float64)
            if self._gradient_sums is None:
                self._gradient_sums = [np.zeros_like(g), np.zeros_like(g), 0]
            sums = self._gradient_sums
            sums[0] += g
            sums[1] += g * g
            sums[2] += 1
        if self._count < self.period_steps:
            return False
        self.period_means.append(self._total / self._count if monitor is None else monitor())
        self._total, self._count = 0.0, 0
        if self._gradient_sums is not None:
            self.period_gradients.append(tuple(self._gradient_sums))
            self._gradient_sums = None
        return True

    def steps_left_in_period(self):
        """Steps :meth:`add` takes until it closes the current period (a caller that
        reads steps in batches reads them by the period's end, when the period's figures
        and the decision to stop are due)."""
        return self.period_steps - self._count

    def rise_per_span(self):
        """Rise per span between the last two windows (None before there are two)."""
        w = self.window
        if len(self.period_means) < 2 * w:
            return None
        means = np.asarray(self.period_means[-2 * w :])
        return (means[w:].mean() - means[:w].mean()) / (w * self.spans_per_period)

    def _gradient_window(self):
        """Mean and standard error of each gradient coordinate over the last window
        (None when steps reported no gradient)."""
        periods = self.period_gradients[-self.window :]
        n = sum(p[2] for p in periods)
        if n < 2:
            return None
        mean = sum(p[0] for p in periods) / n
        variance = np.maximum(sum(p[1] for p in periods) / n - mean * mean, 0.0) * n / (n - 1)
        return mean, np.sqrt(variance / n)

    def _ratios(self):
        """(|mean|, |mean| / standard error) of each gradient coordinate over the last
        window, or None when steps reported no gradient."""
        window = self._gradient_window()
        if window is None:
            return None
        mean, error = window
        # A coordinate that never moves (held on a bound: gradient zero) has no error either.
        return np.abs(mean), np.divide(np.abs(mean), error, out=np.zeros_like(mean), where=error > 0)

    def gradient_snr(self):
        """Largest |mean| / standard error, over the coordinates of the hyperparameter
        gradient steeper than ``tol``, in the last window of periods (0 when none is; None
        when steps reported no gradient)."""
        ratios = self._ratios()
        if ratios is None:
            return None
        size, ratio = ratios
        steep = size > self.tol
        return float(ratio[steep].max()) if np.any(steep) else 0.0

    def pull_pays(self, rise):
        """Whether the ELBO's ``rise`` per span is at least :data:`RIDGE_SHARE` of what
        the gradient's pull promises: the pulling coordinates' (steeper than ``tol``, more
        than ``max_gradient_snr`` standard errors from zero) mean gradients times
        ``reach_per_span``. Always True without a reach."""
        if self.reach_per_span is None:
            return True
        size, ratio = self._ratios()
        pulling = (size > self.tol) & (ratio > self.max_gradient_snr)
        promised = float(size[pulling].sum()) * self.reach_per_span
        return rise >= RIDGE_SHARE * promised

    def converged(self):
        """Whether the ELBO has stopped rising by ``tol`` and (when steps report it) the
        hyperparameter gradient no longer pulls one way, or pulls along a ridge where
        following it does not raise the ELBO (:meth:`pull_pays`)."""
        rise = self.rise_per_span()
        if rise is None or not rise < self.tol:
            return False
        snr = self.gradient_snr()
        return snr is None or snr < self.max_gradient_snr or not self.pull_pays(rise)

    def reason_not_converged(self):
        """Why :meth:`converged` is False, in words for a ConvergenceWarning."""
        rise = self.rise_per_span()
        if rise is None:
            return "the stopping rule had too few periods to judge"
        if not rise < self.tol:
            return f"the ELBO was still rising by {rise:.2g} nats per row per epoch (tol={self.tol})"
        return (f"the ELBO had stopped rising but the hyperparameters' gradient still pulled one way "
                f"({self.gradient_snr():.1f} standard errors from zero, more than {self.max_gradient_snr})")
