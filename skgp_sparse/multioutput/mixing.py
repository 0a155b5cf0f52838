"""The mixing of latent marginals into output marginals, and its reverse pass.

With a mean-field q over the latents (each latent's marginal independent of the
others'), the marginal of output p at a row is Gaussian with

    mean_f[n, p] = sum_l W[p, l] mean_g[n, l],   var_f[n, p] = sum_l W[p, l]^2 var_g[n, l]

(the diagonal of W diag(var_g[n]) W^T, eq. 53 of the multi-output paper). Every function
here is written in operators, so it runs on arrays of any Array API library.
"""

import numpy as np


def mix(mean_g, var_g, W):
    """Output marginals (n, P) from latent marginals (n, L) through W (P, L)."""
    return mean_g @ W.T, var_g @ (W * W).T


def unmix(d_mean_f, d_var_f, W):
    """The latents' adjoints (n, L) from the outputs' (n, P): the transpose of :func:`mix`."""
    return d_mean_f @ W, d_var_f @ (W * W)


def mixing_gradient(d_mean_f, d_var_f, mean_g, var_g, W):
    """d/dW of sum(d_mean_f * mean_f + d_var_f * var_f), shape (P, L)."""
    return d_mean_f.T @ mean_g + 2.0 * W * (d_var_f.T @ var_g)


def output_covariances(var_g, W):
    """The P x P covariance of the outputs at each row, W diag(var_g[n]) W^T: (n, P, P)."""
    return np.einsum("pl,nl,ql->npq", W, var_g, W)


def initial_mixing(Y, n_latent):
    """W's start: the principal directions of the observed targets, scaled by their spread.

    Y (n, P) standardised, NaN where missing. The covariance of the outputs is estimated
    from the pairs observed together (each entry from the rows where both are seen); its
    top ``n_latent`` eigenvectors times the square roots of their eigenvalues make W, so
    that W W^T is the best rank-L fit of the targets' covariance and latents of unit prior
    variance start on the data's scale. Directions beyond the P available (L > P) start
    small and random-free: the remaining columns of the identity, scaled by 0.1.
    """
    observed = ~np.isnan(Y)
    Y0 = np.where(observed, Y, 0.0)
    counts = observed.T.astype(np.float64) @ observed.astype(np.float64)
    means = Y0.sum(axis=0) / np.maximum(observed.sum(axis=0), 1)
    centred = np.where(observed, Y - means, 0.0)
    cov = (centred.T @ centred) / np.maximum(counts, 1.0)
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(values)[::-1]
    values, vectors = np.clip(values[order], 1e-6, None), vectors[:, order]
    n_outputs = Y.shape[1]
    W = np.zeros((n_outputs, n_latent))
    k = min(n_latent, n_outputs)
    W[:, :k] = vectors[:, :k] * np.sqrt(values[:k])
    # A sign convention, so that the same targets give the same W on every platform.
    signs = np.sign(W[np.argmax(np.abs(W[:, :k]), axis=0), np.arange(k)])
    W[:, :k] *= np.where(signs == 0, 1.0, signs)
    for l in range(k, n_latent):
        W[l % n_outputs, l] = 0.1
    return W
