"""What every likelihood shares: its flags, and the one entry of its array methods."""

from .. import backend
from ._quadrature import rule_like


class Likelihood:
    """Base class of the observation models.

    A likelihood meets the variational model only through the marginals ``(mean, var)``
    of its latent functions at the n rows of a minibatch: arrays of shape (n, L), where L
    is one except for the multi-class likelihoods, which take one latent function per
    class (L = K). Its methods keep one contract, which their own docstrings refer to
    (:class:`~skgp_sparse.likelihoods.GaussianLikelihood`, the conjugate case, states its
    own: it works per entry of P outputs and takes known noise):

    ``expected_log_lik(y, mean, var)``
        The targets ``y`` of the rows, shape (n, 1) (class labels: shape (n,) or (n, 1),
        integers 0..K-1 or whole floating values), and the marginals give
        ``(ell, d_mean, d_var)``: the per-row expected log-likelihood
        ``E_q[log p(y | f)]``, shape (n, 1), and its derivatives in every latent mean
        and variance, shape (n, L).
    ``predict_proba(mean, var)``
        Classification only (the method exists on those likelihoods alone): the
        predictive class probabilities of the rows, shape (n, K) with rows summing to
        one; for two classes the probability of the label 1 alone, shape (n, 1).

    The prediction methods map the same marginals to the targets.

    The methods take arrays of any Array API namespace and answer in it, on the inputs'
    device. Each starts from :meth:`_inputs`, which finds the namespace of its arrays and
    converts them once: numpy inputs (array-likes included) to float64, as the numpy code
    always took them; arrays of another library to the working float of the marginals.

    A subclass holds only its own parameters: this class adds no state to an instance,
    so pickles of the likelihoods are unchanged by it.
    """

    #: Whether the expected log-likelihood is quadratic in f, so that a natural step of
    #: size one on a full batch lands on the optimal q(u).
    conjugate = False
    #: Whether the exact search that starts a fit runs on Gaussian pseudo-observations of
    #: this likelihood (:mod:`skgp_sparse.optim.pseudo`); the others re-optimise q(u) by
    #: damped natural steps at every evaluation (:mod:`skgp_sparse.optim.fullbatch`).
    pseudo_observation_search = False
    #: Whether known per-row noise (``extra_noise``) adds to the observation noise here;
    #: under the other likelihoods the model adds it to the latent variance instead.
    takes_known_noise = False

    @property
    def n_latent(self):
        """L, the latent functions a row's likelihood takes (one; K for the multi-class
        likelihoods)."""
        return 1

    @staticmethod
    def _inputs(y, mean, var, float_targets=True):
        """The namespace of a call and its arrays as the computation takes them.

        Parameters
        ----------
        y : array, array-like or None
            Targets or labels; None for the prediction methods.
        mean, var : array or array-like
            Marginal means and variances (or covariances) of the latent functions.
        float_targets : bool, default=True
            Convert ``y`` with ``mean`` and ``var``. False leaves it as given (class
            labels, which are read as integers); it still takes part in finding the
            namespace.

        Returns
        -------
        xp : namespace
            numpy unless one of the arrays is of another library
            (:func:`skgp_sparse.backend.input_namespace`).
        y, mean, var : arrays of ``xp``
            numpy: float64 arrays (lists accepted); another library: in the working
            float of ``mean`` and ``var`` (:func:`skgp_sparse.backend.likelihood_floats`).
            ``y`` is None when it was given as None.
        """
        xp = backend.input_namespace(y, mean, var)
        convert_y = float_targets and y is not None
        floats = backend.likelihood_floats(xp, (mean, var), mean, var, *((y,) if convert_y else ()))
        return xp, (floats[2] if convert_y else y), floats[0], floats[1]

    def _inputs_and_rule(self, y, mean, var):
        """:meth:`_inputs` of a likelihood that takes its expectations by Gauss-Hermite
        quadrature, with its rule put next to the converted ``mean``.

        The rule is the subclass's host arrays ``self._nodes`` and ``self._weights``
        (:func:`~skgp_sparse.likelihoods._quadrature.gauss_hermite`).

        Returns
        -------
        xp : namespace
        y, mean, var : arrays of ``xp``
            As :meth:`_inputs` returns them.
        nodes, weights : arrays of ``xp``
            The rule in the dtype and on the device of ``mean``
            (:func:`~skgp_sparse.likelihoods._quadrature.rule_like`).
        """
        xp, y, mean, var = self._inputs(y, mean, var)
        nodes, weights = rule_like(self._nodes, self._weights, mean)
        return xp, y, mean, var, nodes, weights
