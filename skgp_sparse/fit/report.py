"""What a finished fit tells its user: parameters stuck on a bound, jitter above the noise,
q(u) short of its optimum."""


import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..linalg import JitterWarning
from ..optim.fullbatch import optimal_q
from .._warnings import warn
from .jitter import smallest_noise


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


def warn_rows_outside_the_box(estimator_name):
    """A UserWarning when rows outside Fourier features' box keep a Gaussian fit from its
    one pass over the rows (their K(u, f) depends on the length scale)."""
    warn(
        f"{estimator_name}: some training rows lie outside the box of the Fourier features (set from a "
        "sample of the rows), so the fit trains on minibatches instead of one pass over the rows; pass "
        "FourierFeatures(box=...) covering every row, or a wider margin, for the one-pass fit.",
        UserWarning,
    )


#: Nats per training row by which a fit's ELBO may fall short of the best q(u) at its own
#: hyperparameters and inducing inputs before the fit warns. A fit whose steps reached q's
#: optimum falls short only by rounding and by the minibatch noise of its last steps, far
#: below this; the failures it catches fall short by thousands of nats a row (docs/constants.md).
Q_SHORTFALL_PER_ROW = 0.1


def warn_q_short_of_optimum(estimator_name, model, reference, X, Y):
    """A ConvergenceWarning when the fitted q(u) is far below the best q(u) on rows (X, Y).

    ``reference`` is a model of the same hyperparameters and inducing inputs whose best q
    is one exact natural step away (the exact search's model under a Gaussian likelihood,
    at every set of inducing inputs the basis has; the fit's plan says whether its step is
    exact, ``search_q_solver``): its bound with q optimal is what any q at those inducing
    inputs reaches at most. Both bounds count the rows as the estimate of all the model's
    rows.
    """
    fitted = model.evaluate(X, Y, need_grad=False).elbo
    best = optimal_q(reference, X, Y, exact=True)
    shortfall = (best - fitted) / model.n_data
    if not shortfall > Q_SHORTFALL_PER_ROW:
        return
    noise = "" if model.noise is None else f" at a noise variance of {float(np.min(model.noise.value)):.3g}"
    warn(
        f"{estimator_name}: the fitted q(u) falls {shortfall:.3g} nats per row short of the best q(u) at the "
        f"fitted hyperparameters and inducing inputs{noise}: the variational steps did not reach it, and the "
        "predictions and log_marginal_likelihood_value_ are those of the worse q(u). A small fixed noise "
        "makes the natural steps stiff: fit one batch on the coupled basis (batch_size=None, where q(u) is "
        "set in closed form), or raise noise_variance or the lower bound of noise_variance_bounds.",
        ConvergenceWarning,
    )


def report_fit(name, model, step_tolerance):
    """Warnings about the fitted parameters (bounds, jitter against noise)."""
    if model.learn_hyperparameters:
        noise = model.noise
        # Each latent's kernel of a multi-output model, and each output's noise variance.
        for kernel in model.kernels:
            warn_at_bounds(name, kernel.to_sklearn(), step_tolerance)
        if noise is not None and noise.learned:
            for value in np.ravel(noise.value):
                warn_noise_at_bounds(name, float(value), tuple(np.exp(noise.log_bounds)), step_tolerance)
        if "scale" in getattr(model.likelihood, "param_names", ()):
            warn_scale_at_bounds(name, model.likelihood, step_tolerance)
    if model.noise is not None:
        scale = float(np.mean(model.covariances[0].kuu_diag(model.state.inducing)))
        warn_jitter_above_noise(name, model.jitter * scale, smallest_noise(model))
