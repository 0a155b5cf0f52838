"""The seam: one place computes K(u, u), K(u, f), K(u, u') and K(f, f) for a kind of
inducing features under a kernel, resolved once by (feature kind, kernel form).

:func:`covariances` reads the compiled kernel's form (:func:`._forms.kernel_form`) and
picks the implementation registered for the most specific pair: the kind's classes in
method resolution order first, then the form's, so that a subclass of a kind inherits its
parent's pair and a pair registered for the subclass wins. A kind with no pair for the
kernel's form is an error that names the pairs there are.

Every basis, the collapsed bounds, the predictors and the fit's jitter rule take the
resolved object where they would call the kernel: a model resolves it when it is made, a
predictor when it is rebuilt (after unpickling too), never inside a step. For inducing
points the resolved object is the compiled kernel itself (its ``kuu``, ``kuf``, ...
are the kernel between points), so points keep their speed and results; every other
kind is a :class:`Covariances`.
"""

import numpy as np

from .. import backend
from ._forms import KernelForm, kernel_form
from ._kinds import InducingPoints

__all__ = ["Covariances", "register_features", "covariances", "registered_pairs", "point_covariances"]

#: (feature kind class, kernel form class) -> implementation class.
_REGISTRY = {}


def register_features(feature_kind, kernel_form, implementation):
    """Register ``implementation`` for features of class ``feature_kind`` under kernels of
    form ``kernel_form``.

    Parameters
    ----------
    feature_kind : subclass of :class:`~skgp_sparse.features.InducingFeatures`
    kernel_form : subclass of :class:`~skgp_sparse.features.KernelForm`
        :class:`KernelForm` itself for every kernel.
    implementation : callable
        ``implementation(features, kernel, form)`` gives the covariances of ``features``
        under a model's compiled ``kernel`` of that form: a :class:`Covariances` (a
        subclass of it is the usual implementation), or an object with its methods.
    """
    if not callable(implementation):
        raise TypeError(f"implementation must be callable (a subclass of Covariances); got {implementation!r}")
    _REGISTRY[(feature_kind, kernel_form)] = implementation


def registered_pairs():
    """The registered (kind, form) pairs, as readable names."""
    return sorted(f"{kind.__name__} with {form.describe()}" for kind, form in _REGISTRY)


def covariances(features, kernel):
    """The :class:`Covariances` of ``features`` under the compiled ``kernel``."""
    # The form is read only where a pair for the kind asks for more than any kernel (the
    # points' pair takes any object with the compiled kernels' calls).
    pairs = [form for kind, form in _REGISTRY if isinstance(features, kind)]
    form = kernel_form(kernel.to_sklearn()) if any(f is not KernelForm for f in pairs) else KernelForm(kernel)
    for kind in type(features).__mro__:
        for form_class in type(form).__mro__:
            implementation = _REGISTRY.get((kind, form_class))
            if implementation is not None:
                return implementation(features, kernel, form)
    raise ValueError(
        f"{type(features).__name__} features have no covariances for the kernel {kernel.to_sklearn()!r} "
        f"(its form: {type(form).describe()}); the registered pairs are: {', '.join(registered_pairs())}. "
        "Use inducing_features='points' with this kernel, or register_features a pair for it"
    )


class Covariances:
    """K(u, u), K(u, f), K(u, u') and K(f, f) of one kind of features under one kernel.

    The ``*_vjp`` methods return the matrix and ``back(bar)``: the gradient of
    ``sum(bar * K)`` as ``(theta_bar, Z_bar)`` in the kernel's log-hyperparameters and in
    the first inducing array (K(f, f)'s diagonal: theta_bar alone), both in the inputs'
    library as a compiled kernel's. K(f, f) is the kernel's own for every kind.

    A kind writes ``_kuu``, ``_kuu_vjp``, ``_kuf``, ``_kuf_vjp``, ``_kuu_cross`` and
    ``_kuu_cross_vjp`` on float64 numpy arrays; the public methods take arrays of any
    library and answer in the inputs' library, device and float dtype (one round trip to
    the host each: these kinds compute on the host).

    Parameters
    ----------
    features : InducingFeatures
    kernel : CompiledKernel
    form : KernelForm
    """

    def __init__(self, features, kernel, form):
        self.features = features
        self.kernel = kernel
        self.form = form

    def kuu(self, Z):
        return _like(self._kuu(backend.host_float64(Z)), Z)

    def kuu_vjp(self, Z):
        K, back = self._kuu_vjp(backend.host_float64(Z))
        return _like(K, Z), _returning_like(back, Z)

    def kuf(self, Z, X):
        return _like(self._kuf(backend.host_float64(Z), backend.host_float64(X)), X)

    def kuf_vjp(self, Z, X):
        K, back = self._kuf_vjp(backend.host_float64(Z), backend.host_float64(X))
        return _like(K, X), _returning_like(back, Z)

    def kuu_cross(self, Z1, Z2):
        return _like(self._kuu_cross(backend.host_float64(Z1), backend.host_float64(Z2)), Z1)

    def kuu_cross_vjp(self, Z1, Z2):
        K, back = self._kuu_cross_vjp(backend.host_float64(Z1), backend.host_float64(Z2))
        return _like(K, Z1), _returning_like(back, Z1)

    def kuu_diag(self, Z):
        """The prior variance of each inducing variable (the diagonal of :meth:`kuu`)."""
        return _like(self._kuu_diag(backend.host_float64(Z)), Z)

    def _kuu_diag(self, Z):
        return np.diag(self._kuu(Z)).copy()

    def kuf_with_set(self, Z, X, Z2):
        """K(u, f) at the rows X beside K(u, u') of a second set Z2: (M, n + M2)."""
        return _side_by_side(self.kuf(Z, X), self.kuu_cross(Z, Z2))

    def kuf_with_set_vjp(self, Z, X, Z2):
        k_rows, back_rows = self.kuf_vjp(Z, X)
        k_set, back_set = self.kuu_cross_vjp(Z, Z2)
        n = k_rows.shape[1]

        def back(bar):
            theta_rows, z_rows = back_rows(bar[:, :n])
            theta_set, z_set = back_set(bar[:, n:])
            return theta_rows + theta_set, z_rows + z_set

        return _side_by_side(k_rows, k_set), back

    # --- the kernel's own -------------------------------------------------------------
    def kff(self, X):
        """The prior covariance of f at the rows X (n, n)."""
        return self.kernel(X)

    def kff_diag(self, X):
        """The prior variance of f at each row of X (n,)."""
        return self.kernel.diag(X)

    def kff_diag_vjp(self, X):
        return self.kernel.diag_vjp(X)

    @property
    def theta(self):
        """The kernel's log-hyperparameters (a copy), which the covariances depend on."""
        return self.kernel.theta

    @property
    def n_theta(self):
        return self.kernel.n_theta

    #: The matrices it returns are its own (fresh) arrays, which a caller may write over.
    hands_over_matrices = True


def _like(a, like):
    """The float64 numpy array ``a`` in the library, device and float dtype of ``like``
    (float32 stays float32, anything else is float64 where the device has it)."""
    if not backend.is_foreign(like):
        return a.astype(np.float32 if np.asarray(like).dtype == np.float32 else np.float64, copy=False)
    xp = backend.namespace(like)
    return backend.to_namespace(a, xp, device=backend.device_of(like), dtype=like.dtype)


def _returning_like(back, like):
    """``back`` taking an adjoint of any library, its Z_bar in the library, device and
    dtype of ``like`` and its theta_bar there too in the device's widest float (as a
    compiled kernel answers)."""

    def on_host(bar):
        theta_bar, z_bar = back(backend.host_float64(bar))
        return _widest_like(theta_bar, like), _like(z_bar, like)

    return on_host


def _widest_like(a, like):
    if not backend.is_foreign(like):
        return a
    xp, device = backend.namespace(like), backend.device_of(like)
    return backend.to_namespace(a, xp, device=device, dtype=backend.widest_float(xp, device))


def _side_by_side(left, right):
    return backend.namespace(left, right).concat([left, right], axis=1)


def point_covariances(features, kernel, form):
    """Inducing points under any kernel: the compiled kernel, between points."""
    return kernel


register_features(InducingPoints, KernelForm, point_covariances)
