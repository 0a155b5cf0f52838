"""Step sizes of the natural-gradient updates: schedule and back-off."""

from ..linalg import CholeskyError


class NaturalStepSchedule:
    """Step size of the natural step on the Gaussian variational blocks.

    Parameters
    ----------
    step_size : float
        The step size after the start-up phase.
    conjugate : bool
        Whether the likelihood is Gaussian. Then every step of size <= 1 keeps the
        precision positive definite, and the schedule starts at 1 and decays as 1/t to
        ``step_size``: the first steps average the minibatch optima, later ones follow
        the moving hyperparameters. On a full batch the step stays 1 (each step lands
        on the optimum for the current hyperparameters).
    full_batch : bool
    warmup_steps : int
        Non-conjugate likelihoods: the step grows linearly from ``step_size / warmup_steps``
        to ``step_size`` (natural gradients overshoot there early on; GPflow #820).
    elbo_drop_tol : float or None
        Back-off on a falling ELBO: when an epoch's mean ELBO per row is more than this
        many nats below the previous epoch's (see :meth:`end_epoch`), every later step is
        halved for good. None turns this off (the Gaussian case, where steps of size at
        most 1 cannot overshoot).

    Notes
    -----
    A step whose new precision is not positive definite is retried at half the size
    (up to ``max_halvings`` times) and the schedule remembers the reduction, which then
    recovers by 10% per successful step. A falling ELBO is the slower symptom of the same
    overshoot: positive definite steps that are too large for the minibatch noise make the
    ELBO oscillate rather than rise, and that reduction does not recover, since the noise
    does not go away. ``n_backoffs`` counts the halvings of both kinds.
    """

    max_halvings = 20

    def __init__(self, step_size, conjugate, full_batch, warmup_steps=50, elbo_drop_tol=None):
        self.step_size = float(step_size)
        self.conjugate = conjugate
        self.full_batch = full_batch
        self.warmup_steps = max(int(warmup_steps), 1)
        self.elbo_drop_tol = elbo_drop_tol
        self.t = 0
        self.scale = 1.0
        self.drop_scale = 1.0
        self.n_backoffs = 0
        self._last_epoch_elbo = None

    def current(self):
        if self.conjugate:
            base = 1.0 if self.full_batch else max(self.step_size, 1.0 / (self.t + 1))
        else:
            base = self.step_size * min(1.0, (self.t + 1) / self.warmup_steps)
        return min(1.0, base * self.scale * self.drop_scale)

    def end_epoch(self, elbo_per_row):
        """Record an epoch's mean ELBO per row; halve later steps if it fell too far.

        Parameters
        ----------
        elbo_per_row : float
            Mean minibatch ELBO estimate of the epoch divided by the number of rows.

        Returns
        -------
        bool
            Whether the steps were halved.
        """
        last, self._last_epoch_elbo = self._last_epoch_elbo, elbo_per_row
        if self.elbo_drop_tol is None or last is None or elbo_per_row >= last - self.elbo_drop_tol:
            return False
        self.drop_scale *= 0.5
        self.n_backoffs += 1
        return True

    def apply(self, take_step):
        """Call ``take_step(size)``; on a failed Cholesky halve the size and retry.

        Returns
        -------
        The value returned by ``take_step`` and the size that succeeded.

        Raises
        ------
        CholeskyError
            If even a tiny step fails, which means the current point itself is broken.
        """
        size = self.current()
        for _ in range(self.max_halvings):
            try:
                result = take_step(size)
            except CholeskyError:
                self.n_backoffs += 1
                self.scale *= 0.5
                size *= 0.5
                continue
            self.t += 1
            self.scale = min(1.0, self.scale * 1.1)
            return result, size
        raise CholeskyError(
            f"the natural-gradient step failed even at size {size:.1e}; the variational "
            "covariance is numerically singular. Try a smaller natural_step_size."
        )
