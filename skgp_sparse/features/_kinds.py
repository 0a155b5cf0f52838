"""The kinds of inducing features a user chooses (``inducing_features=``), with their settings.

A kind says what its inducing array holds (the state's ``inducing`` field, which Adam
moves where the kind learns it) and how a fit starts it from inducing points placed in
input space (``inducing_init``). Its covariances live in the registry
(:mod:`._registry`), keyed by the kind's class and the kernel's form.
"""

import numpy as np

__all__ = ["InducingFeatures", "InducingPoints", "Multiscale", "as_features", "KINDS", "FITTED_ATTRIBUTES"]


class InducingFeatures:
    """The base of the kinds of inducing features (each a class with its settings)."""

    #: The name ``inducing_features=`` takes for the kind's default settings.
    name = None
    #: Whether ``learn_inducing`` moves the features' parameters.
    learnable = True
    #: Whether a fit places the features in input space (``inducing_init``) before
    #: :meth:`start`; otherwise :meth:`bind` lays them out.
    placed_in_input_space = True
    #: Whether the estimators' default kernel (``kernel=None``) takes an RBF profile in
    #: place of its Matern with these features (their closed forms are the RBF's).
    default_kernel_rbf = False
    #: Whether the default kernel may add a learned constant (a classifier's bias): only
    #: inducing points have covariances for any kernel.
    takes_a_bias = False
    #: Whether the covariances compute where the rows are (a device's arrays), so that a
    #: training loop may hold the hyperparameters there: the compiled kernels of inducing
    #: points do; the other kinds compute on the host and read theta there.
    computes_on_device = False

    def bind(self, X, n_features, kernel):
        """The features a fit on the rows X (a sample) uses, about ``n_features`` of them,
        under the compiled ``kernel``: themselves, for kinds placed in input space."""
        return self

    def n_columns(self, n_features):
        """The columns of the inducing array for inputs of ``n_features`` columns."""
        return n_features

    def start(self, points, length_scales):
        """The inducing array of a fresh fit from ``points`` (M, d) placed in input space
        (``inducing_init``), with the kernel's length scale of each dimension (d,) (None
        where the kernel has none)."""
        return points

    def centres(self, inducing):
        """Where each feature sits in input space (M, d)."""
        return inducing

    def step_units(self, x_scale):
        """The per-column units of Adam's steps on the inducing array, from the spread of
        each input column."""
        return x_scale

    def fitted_attributes(self, inducing):
        """The estimator's fitted attributes that describe a fitted inducing array."""
        return {"inducing_points_": inducing}

    def __repr__(self):
        return f"{type(self).__name__}()"

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self):
        return hash(type(self))


class InducingPoints(InducingFeatures):
    """Inducing points: each inducing variable is the latent function's value at a point
    of the input space, ``u_m = f(z_m)`` (the default)."""

    name = "points"
    takes_a_bias = True
    computes_on_device = True


class Multiscale(InducingFeatures):
    """Gaussian-window averages of the latent function (Lazaro-Gredilla and
    Figueiras-Vidal 2009): ``u_m`` is the average of f under a Gaussian window around a
    centre ``z_m`` with a width per input dimension, both learned. Widths that go to zero
    give inducing points; wider windows let one variable carry the function over a
    longer range. Closed forms exist for an RBF kernel (isotropic, per-feature or
    :class:`~skgp_sparse.kernels.FeatureScaledRBF`), times a ConstantKernel, plus a
    WhiteKernel.

    The inducing array holds the centres, then the log widths: (M, 2 d).

    Parameters
    ----------
    initial_width : float, default=0.5
        The windows' widths at the start of a fit, as a fraction of the kernel's length
        scale in each dimension.
    """

    name = "multiscale"
    default_kernel_rbf = True

    def __init__(self, initial_width=0.5):
        if not initial_width > 0:
            raise ValueError(f"Multiscale(initial_width=...) must be positive; got {initial_width!r}")
        self.initial_width = float(initial_width)

    def __repr__(self):
        return f"Multiscale(initial_width={self.initial_width!r})"

    def n_columns(self, n_features):
        return 2 * n_features

    def start(self, points, length_scales):
        scale = np.ones(points.shape[1]) if length_scales is None else np.asarray(length_scales, dtype=np.float64)
        widths = np.broadcast_to(np.log(self.initial_width * scale), points.shape)
        return np.concatenate([points, widths], axis=1)

    def centres(self, inducing):
        return inducing[:, : inducing.shape[1] // 2]

    def step_units(self, x_scale):
        # A log width moves by about one unit of its own, whatever the input's spread.
        x_scale = np.asarray(x_scale, dtype=np.float64)
        return np.concatenate([x_scale, np.ones_like(x_scale)])

    def fitted_attributes(self, inducing):
        centres, widths = self.split(inducing)
        return {"inducing_points_": centres, "inducing_widths_": widths}

    @staticmethod
    def split(inducing):
        """(centres, widths) of a Multiscale inducing array."""
        d = inducing.shape[1] // 2
        return inducing[:, :d], np.exp(inducing[:, d:])


#: The kinds ``inducing_features=`` names (:mod:`._fourier` adds its own).
KINDS = {kind.name: kind for kind in (InducingPoints, Multiscale)}

#: Every fitted attribute a kind may set (a refit with another kind drops the others).
FITTED_ATTRIBUTES = ("inducing_points_", "inducing_widths_")


def as_features(value):
    """The feature object of ``inducing_features``: a name of :data:`KINDS`, or an object."""
    if isinstance(value, InducingFeatures):
        return value
    if isinstance(value, str) and value in KINDS:
        return KINDS[value]()
    raise ValueError(
        f"inducing_features must be one of {sorted(KINDS)} or an object of skgp_sparse.features "
        f"(InducingPoints, Multiscale, FourierFeatures); got {value!r}"
    )
