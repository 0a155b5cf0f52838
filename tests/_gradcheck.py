"""Finite-difference check of every gradient a VariationalModel hands to Adam."""

import numpy as np


def assert_adam_gradients_match(model, X, Y, eps=1e-6, rtol=1e-5, atol=1e-6, collapsed=False):
    """Central differences of ``model.evaluate(X, Y).elbo`` against its reported gradients
    (``collapsed``: of ``model.collapsed_evaluate``, the bound with q(u) optimal)."""
    if collapsed:
        grads = model.collapsed_evaluate(X, Y).grads

        def bound():
            return model.collapsed_evaluate(X, Y).elbo
    else:
        grads = model.evaluate(X, Y).grads

        def bound():
            return model.evaluate(X, Y, need_grad=False).elbo

    assert_gradients_match(model, grads, bound, eps, rtol, atol)


def assert_gradients_match(model, grads, bound, eps=1e-6, rtol=1e-5, atol=1e-6):
    """Central differences of ``bound()`` in every parameter Adam moves against ``grads``
    (a dict by parameter name), the model put back after each."""
    params = model.adam_params()
    for name, value in params.items():
        fd = np.zeros(np.shape(value))
        for idx in np.ndindex(fd.shape):
            for sign in (1, -1):
                shifted = {k: np.array(v, dtype=float) for k, v in params.items()}
                shifted[name][idx] += sign * eps
                model.set_adam_params(shifted)
                fd[idx] += sign * bound() / (2 * eps)
        model.set_adam_params(params)
        np.testing.assert_allclose(grads[name], fd, rtol=rtol, atol=atol, err_msg=name)
