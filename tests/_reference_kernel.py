"""A deliberately plain ARD RBF kernel with the compiled-kernel interface.

Used to test the bases on their own, independently of skgp_sparse.kernels.
"""

import numpy as np
from skgp_sparse.kernels import PointCovariances


class ReferenceRBF(PointCovariances):
    white_noise_level = 0.0
    white_noise_theta_index = []
    #: A host kernel: a training loop on a device's arrays keeps its theta on the host.
    holds_device_values = False

    @property
    def held_theta(self):
        return self.theta

    def __init__(self, amplitude, length_scale):
        self.theta = np.log(np.r_[amplitude, np.atleast_1d(length_scale)]).astype(float)
        self.bounds = np.tile([-20.0, 20.0], (self.theta.size, 1))

    def set_theta(self, theta):
        self.theta = np.array(theta, dtype=float)

    def _parts(self):
        return np.exp(self.theta[0]), np.exp(self.theta[1:])

    def __call__(self, A, B=None):
        amp, ls = self._parts()
        B = A if B is None else B
        d = (A[:, None, :] - B[None, :, :]) / ls
        return amp * np.exp(-0.5 * np.sum(d * d, axis=-1))

    def diag(self, A):
        return np.full(A.shape[0], self._parts()[0])

    def vjp(self, A, B=None):
        amp, ls = self._parts()
        gram = B is None
        B = A if gram else B
        K = self(A, B)

        def back(K_bar):
            W = K_bar * K
            diff = A[:, None, :] - B[None, :, :]
            theta_bar = np.r_[W.sum(), np.einsum("ij,ijd->d", W, diff**2) / ls**2]
            a_bar = -np.einsum("ij,ijd->id", W, diff) / ls**2
            if gram:
                a_bar = a_bar + np.einsum("ji,jid->id", W, -diff) / ls**2 * -1
            return theta_bar, a_bar

        return K, back

    def diag_vjp(self, A):
        d = self.diag(A)
        return d, lambda d_bar: np.r_[np.sum(d_bar * d), np.zeros(self.theta.size - 1)]
