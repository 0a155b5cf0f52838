"""Likelihoods: expected log-likelihood of the latent marginals and its derivatives."""

from .bernoulli import BernoulliLikelihood
from .gaussian import GaussianLikelihood, NoiseParameter
from .multiclass import RobustMaxLikelihood, SoftmaxLikelihood

__all__ = [
    "BernoulliLikelihood",
    "GaussianLikelihood",
    "NoiseParameter",
    "RobustMaxLikelihood",
    "SoftmaxLikelihood",
]
