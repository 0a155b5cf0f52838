"""Moving code does not move results: each configuration of tests/_same_fits.py fits to the
predictions and bounds saved in tests/data/same_fits.npz (rtol 1e-10 in float64, 1e-4 in
float32). A change that alters results on purpose regenerates that file in a commit of its
own that says why (``python -m tests._same_fits``)."""

import numpy as np
import pytest

from . import _same_fits


@pytest.fixture(scope="module")
def saved():
    with np.load(_same_fits.SAVED) as arrays:
        return dict(arrays)


@pytest.mark.parametrize("name", list(_same_fits.CONFIGS))
def test_fit_gives_the_saved_results(name, saved):
    library = _same_fits.CONFIGS[name][3]
    if library is not None:
        pytest.importorskip(library)
    fitted = _same_fits.run(name)
    expected = {key.partition("/")[2]: value for key, value in saved.items() if key.startswith(f"{name}/")}
    assert sorted(fitted) == sorted(expected)
    for key, value in fitted.items():
        np.testing.assert_allclose(value, expected[key], rtol=_same_fits.tolerance(name), atol=0, err_msg=f"{name}: {key}")


def test_every_configuration_is_saved(saved):
    """A configuration added without regenerating the file would be compared with nothing."""
    assert {key.partition("/")[0] for key in saved} == set(_same_fits.CONFIGS)
