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

    Notes
    -----
    A step whose new precision is not positive definite is retried at half the size
    (up to ``max_halvings`` times) and the schedule remembers the reduction, which then
    recovers by 10% per successful step. ``n_backoffs`` counts the halvings.
    """

    max_halvings = 20

    def __init__(self, step_size, conjugate, full_batch, warmup_steps=50):
        self.step_size = float(step_size)
        self.conjugate = conjugate
        self.full_batch = full_batch
        self.warmup_steps = max(int(warmup_steps), 1)
        self.t = 0
        self.scale = 1.0
        self.n_backoffs = 0

    def current(self):
        if self.conjugate:
            base = 1.0 if self.full_batch else max(self.step_size, 1.0 / (self.t + 1))
        else:
            base = self.step_size * min(1.0, (self.t + 1) / self.warmup_steps)
        return min(1.0, base * self.scale)

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
