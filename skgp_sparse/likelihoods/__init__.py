"""Likelihoods: expected log-likelihood of the latent marginals and its derivatives."""

from .gaussian import GaussianLikelihood, NoiseParameter

__all__ = ["GaussianLikelihood", "NoiseParameter"]
