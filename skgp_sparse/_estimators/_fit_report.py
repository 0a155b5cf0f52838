"""What a finished fit tells its user: parameters stuck on a bound, jitter above the noise."""


import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..linalg import JitterWarning
from ._warnings import warn


def _near(value, bound, tolerance):
    return abs(value - bound) <= tolerance or np.isclose(value, bound)


def warn_at_bounds(estimator_name, kernel, tolerance, noise=None):
    """A ConvergenceWarning for every hyperparameter that ended within ``tolerance`` of a bound.

    Parameters
    ----------
    estimator_name : str
    kernel : fitted scikit-learn kernel (``kernel_``)
    tolerance : float
        Distance in log space that counts as "on the bound": one optimiser step (Adam's
        learning rate) for minibatch fits, rounding for quasi-Newton fits.
    noise : (float, (float, float)) or None
        The fitted noise variance and its bounds, when it is learned apart from the kernel.
    """
    theta, bounds = kernel.theta, kernel.bounds
    index = 0
    for hyper in kernel.hyperparameters:
        if hyper.fixed:
            continue
        for dim in range(hyper.n_elements):
            low, high = bounds[index]
            for side, bound, advice in (("lower", low, "Decreasing"), ("upper", high, "Increasing")):
                if _near(theta[index], bound, tolerance):
                    warn(
                        f"{estimator_name}: the fitted value of dimension {dim} of the kernel parameter "
                        f"{hyper.name} ({np.exp(theta[index]):.3g}) is at its {side} bound {np.exp(bound):.3g}. "
                        f"{advice} the bound and calling fit again may find a better value.",
                        ConvergenceWarning,
                    )
            index += 1
    if noise is not None:
        warn_noise_at_bounds(estimator_name, *noise, tolerance)


def warn_noise_at_bounds(estimator_name, value, bounds, tolerance):
    """A ConvergenceWarning when a fitted noise variance ``value`` ended within ``tolerance``
    (in log space) of one of its ``bounds`` (low, high)."""
    low, high = bounds
    for side, bound, advice in (("lower", low, "Decrease"), ("upper", high, "Increase")):
        if _near(np.log(value), np.log(bound), tolerance):
            warn(
                f"{estimator_name}: the fitted noise variance ({value:.3g}) is at the {side} bound "
                f"{bound:.3g} of noise_variance_bounds. {advice} that bound and calling fit again may "
                "find a better value.",
                ConvergenceWarning,
            )


def warn_scale_at_bounds(estimator_name, likelihood, tolerance):
    """A ConvergenceWarning when a Student-t scale ended on a bound (the square roots of the
    regressor's ``noise_variance_bounds``, which the warning names)."""
    position = likelihood.param_names.index("scale")
    log_scale = likelihood.log_params[position]
    low, high = (float(b[position]) for b in likelihood.log_bounds)
    for side, bound, advice in (("lower", low, "Decrease"), ("upper", high, "Increase")):
        if _near(log_scale, bound, tolerance):
            warn(
                f"{estimator_name}: the fitted Student-t scale ({np.exp(log_scale):.3g}) is at its {side} "
                f"bound {np.exp(bound):.3g}, the square root of that of noise_variance_bounds. {advice} "
                "that bound and calling fit again may find a better value.",
                ConvergenceWarning,
            )


def warn_jitter_above_noise(estimator_name, absolute_jitter, noise_variance):
    """A JitterWarning when the jitter on K(Z, Z) is not small against the noise it competes with."""
    if noise_variance is None or absolute_jitter <= noise_variance:
        return
    warn(
        f"{estimator_name}: factorising K(Z, Z) needed a jitter of {absolute_jitter:.3g}, more than the "
        f"noise variance {noise_variance:.3g}. The bound then loses about jitter / (2 noise) nats per "
        "well-determined inducing direction and favours small kernel amplitudes. Remove duplicated or "
        "nearly equal inducing inputs (fewer n_inducing), raise the lower bound of the noise, or "
        "standardise X.",
        JitterWarning,
    )
