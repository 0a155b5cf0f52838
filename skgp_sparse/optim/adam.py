"""Adam (Kingma and Ba, 2015) over a dict of named arrays, with box bounds.

The arrays may belong to any Array API library (numpy, CuPy, torch, ...): each parameter's
moments live in its own library and on its own device, so that parameters on a GPU (the
inducing inputs, and the hyperparameters while a training loop holds them there) never
leave it, while those on the host stay there; a parameter that moves between the two
takes its moments with it.
"""

import numpy as np

from .. import backend


class Adam:
    """Bias-corrected Adam that ascends an objective.

    Parameters
    ----------
    learning_rate : float
    beta1, beta2, eps : float
        The usual moment decay rates and denominator guard.
    step_scales : dict of name -> array, optional
        Per-parameter multipliers of the learning rate, broadcast against the parameter.
        Adam's steps have the size of the learning rate whatever the gradient's scale, so
        a parameter in data units (inducing inputs) needs its step in those units: the
        estimators pass each feature's spread here.

    Notes
    -----
    Parameters live in a dict ``{name: ndarray}``; each name has its own moments, so the
    set of parameters (kernel hyperparameters, log noise, inducing inputs, ...) is
    whatever the caller hands in. ``bounds`` clip a parameter after its step, which is
    how sklearn-style hyperparameter bounds hold. ``rate_scales`` of :meth:`step` vary
    the learning rate per parameter from step to step (a basis can hold its inducing
    inputs still while its variational parameters settle).
    """

    def __init__(self, learning_rate=0.01, beta1=0.9, beta2=0.999, eps=1e-8, step_scales=None):
        self.learning_rate = learning_rate
        self.step_scales = {} if step_scales is None else dict(step_scales)
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps
        self.t = 0
        self._m = {}
        self._v = {}
        self._held = {}

    def step(self, params, grads, bounds=None, rate_scales=None):
        """Return new parameters ``params + lr * m_hat / (sqrt(v_hat) + eps)``.

        Parameters
        ----------
        params, grads : dict of name -> ndarray
            Current values and gradients of the objective to maximise.
        bounds : dict of name -> (lower, upper), optional
            Arrays or scalars broadcast against the parameter.
        rate_scales : dict of name -> float, optional
            Multipliers of this step's learning rate (1 for names not given). A parameter
            with 0 is returned as it is, and neither its moments nor its step count move:
            one held still for the first steps then starts as with a fresh Adam (its bias
            correction counts only the steps it took), rather than with moments filled by
            gradients of a state it never saw.
        """
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        rate_scales = {} if rate_scales is None else rate_scales
        # setdefault: an Adam pickled before held parameters existed has no such record.
        held = self.__dict__.setdefault("_held", {})
        out = {}
        for name, value in params.items():
            scale = rate_scales.get(name, 1.0)
            if scale == 0.0:
                held[name] = held.get(name, 0) + 1
                out[name] = value
                continue
            # Steps this parameter took (self.t for one never held, as before).
            t = self.t - held.get(name, 0)
            corr1 = 1.0 - b1**t
            corr2 = 1.0 - b2**t
            g = grads[name]
            xp = backend.namespace(value, g)
            m = self._m.get(name)
            if m is None or m.shape != g.shape:
                m = xp.zeros_like(g)
                self._v[name] = xp.zeros_like(g)
            elif backend.namespace(m) is not xp:
                # The parameter moved between the host and a device (a training loop holds
                # the hyperparameters on its rows' device): its moments follow it.
                m, self._v[name] = (backend.to_namespace(a, xp, device=backend.device_of(g), dtype=g.dtype)
                                    for a in (m, self._v[name]))
            v = self._v[name]
            m = b1 * m + (1.0 - b1) * g
            v = b2 * v + (1.0 - b2) * g * g
            self._m[name], self._v[name] = m, v
            rate = self.learning_rate * self._in_namespace(self.step_scales.get(name, 1.0), value, xp) * scale
            new = value + rate * (m / corr1) / (xp.sqrt(v / corr2) + self.eps)
            if bounds is not None and name in bounds:
                low, high = (self._in_namespace(b, value, xp) for b in bounds[name])
                new = xp.clip(new, low, high)
            out[name] = new
        return out

    def moments_to_host(self, names):
        """Numpy copies of the moments of the parameters ``names`` (those a training loop
        held on a device goes back to the host with them), so that the optimiser of a
        fitted estimator pickles and continues anywhere."""
        for moments in (self._m, self._v):
            for name in names:
                if name in moments and backend.on_device(moments[name]):
                    moments[name] = np.asarray(backend.to_numpy(moments[name]))

    @staticmethod
    def _in_namespace(factor, like, xp):
        """A scalar as it is; an array (per-feature step scales, bounds) in ``like``'s
        library, device and dtype, so that host settings combine with device parameters
        (and float64 settings do not promote a float32 parameter). The copy on a device
        is made once (:func:`skgp_sparse.backend.constant`), not at every step."""
        if np.ndim(factor) == 0:
            # A Python float: array_api_strict's clip refuses numpy scalars.
            return float(factor)
        return backend.constant(backend.to_numpy(factor), like, dtype=like.dtype)
