"""Several outputs at once: latent GPs mixed into the outputs (van der Wilk et al. 2020, §4).

P outputs ``f(x) = W g(x)`` of L independent latent GPs ``g_l``, each with its own kernel
hyperparameters and its own q(u_l) on shared inducing inputs (the linear model of
coregionalisation, LMC, with latent inducing variables). Any basis gives each latent's
marginals; the mixing comes after them, on the way to the likelihood, and its transpose
takes the likelihood's adjoints back ("mix after", the paper's computation order 2): a
step costs O(L M^3 + B L M^2 + B P L), never a B x B matrix, never the MP x MP covariance
of vector-valued inducing points.

- :mod:`.mixing`: the mixing of marginals and its reverse pass;
- :mod:`.state`: the state of every latent group and the mixing matrix;
- :mod:`.outputs`: :class:`LinearMixing`, the output map of
  :class:`~skgp_sparse.elbo.VariationalModel` for several groups (the bound and q(u) of
  the joint q in closed form, the mixed predictor);
- :mod:`.collapsed`: the bound with the joint q(u_1..u_L) at its optimum (Gaussian noise,
  coupled basis), which the exact search maximises;
- :mod:`.predictor`: the fitted model frozen into arrays.
"""

from .mixing import initial_mixing
from .outputs import LinearMixing
from .predictor import MixedPredictor
from .state import MixedState

__all__ = ["LinearMixing", "MixedPredictor", "MixedState", "initial_mixing"]
