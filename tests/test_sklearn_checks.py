"""scikit-learn's own estimator checks."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from skgp_sparse import SparseGPClassifier, SparseGPRegressor

#: Checks the estimators are known to fail, with the reason.
EXPECTED_FAILURES = {
    "SparseGPClassifier": {
        "check_sample_weight_equivalence_on_dense_data": (
            "weights and repeated rows give the same objective, but an iterative fit reaches the "
            "same model only to its stopping tolerance (about 5e-6 in probability here), not to "
            "the check's 1e-7; tests/test_weights_noise.py compares them at fit tolerance"
        ),
    },
}


def expected_failures(estimator):
    return EXPECTED_FAILURES.get(type(estimator).__name__, {})


@parametrize_with_checks(
    [
        SparseGPRegressor(n_inducing=20, max_iter=50, random_state=0),
        SparseGPClassifier(n_inducing=10, max_iter=30, random_state=0),
    ],
    expected_failed_checks=expected_failures,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
