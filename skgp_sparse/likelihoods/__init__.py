"""Likelihoods: expected log-likelihood of the latent marginals and its derivatives."""

from ._base import Likelihood
from .bernoulli import BernoulliLikelihood
from .gaussian import GaussianLikelihood, NoiseParameter, OutputGaussianLikelihood, OutputNoise
from .multiclass import RobustMaxLikelihood, SoftmaxLikelihood
from .poisson import PoissonLikelihood
from .student_t import StudentTLikelihood

__all__ = [
    "BernoulliLikelihood",
    "GaussianLikelihood",
    "Likelihood",
    "NoiseParameter",
    "OutputGaussianLikelihood",
    "OutputNoise",
    "PoissonLikelihood",
    "RobustMaxLikelihood",
    "SoftmaxLikelihood",
    "StudentTLikelihood",
]
