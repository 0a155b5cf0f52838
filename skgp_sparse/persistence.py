"""Loading a fitted estimator without pickle: the types to trust in skops.

``skops.io.load`` refuses every type it does not know to be safe. A fitted estimator of
this library holds its own small classes (the estimator, its target scaling, the basis's
variational state and predictor, the kernel class of :mod:`skgp_sparse.kernels`) and
scikit-learn kernel objects; :func:`trusted_types`
names them, so that a file can be checked against the list rather than trusted whole::

    import skops.io as sio
    from skgp_sparse.persistence import trusted_types

    sio.dump(reg, "model.skops")
    unknown = set(sio.get_untrusted_types(file="model.skops")) - set(trusted_types())
    if unknown:
        raise ValueError(f"model.skops holds types this library never writes: {sorted(unknown)}")
    reg = sio.load("model.skops", trusted=trusted_types())

A kernel class of your own is not in the list: add its name yourself if you trust it.
"""

import inspect

from sklearn.gaussian_process import kernels as sklearn_kernels

#: The library's classes that a fitted estimator holds (tests/test_persistence.py fits every
#: basis, both estimators and every likelihood, and fails if one is missing here).
_OWN_TYPES = (
    "skgp_sparse._estimators.classifier.SparseGPClassifier",
    "skgp_sparse._estimators.regressor.SparseGPRegressor",
    "skgp_sparse._estimators.regressor.TargetScaling",
    "skgp_sparse.bases.coupled.CoupledPredictor",
    "skgp_sparse.bases.coupled.CoupledState",
    "skgp_sparse.bases.inverse_free.InverseFreeSettings",
    "skgp_sparse.bases.inverse_free.InverseFreeState",
    "skgp_sparse.bases.orth_decoupled.OrthPredictor",
    "skgp_sparse.bases.orth_decoupled.OrthState",
    "skgp_sparse.bases.solve.SolveState",
    "skgp_sparse.features._fourier.FourierFeatures",
    "skgp_sparse.features._kinds.InducingPoints",
    "skgp_sparse.features._kinds.Multiscale",
    "skgp_sparse.kernels._scaled_rbf.FeatureScaledRBF",
)


def trusted_types():
    """The type names to pass as ``trusted`` to ``skops.io.load`` for a fitted estimator.

    Returns
    -------
    list of str
        This library's classes that a fitted estimator holds, and every kernel class of
        :mod:`sklearn.gaussian_process.kernels` (plain hyperparameter containers).
    """
    kernels = [
        f"{cls.__module__}.{cls.__name__}"
        for _, cls in inspect.getmembers(sklearn_kernels, inspect.isclass)
        if issubclass(cls, sklearn_kernels.Kernel) and cls.__module__ == sklearn_kernels.__name__
        and not inspect.isabstract(cls)
    ]
    return sorted(set(_OWN_TYPES) | set(kernels))
