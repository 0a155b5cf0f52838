"""Warnings that point at the user's line, not at the library's."""

import os
import sys
import warnings

import joblib
import sklearn

#: Folders whose frames a warning passes over: this package's, scikit-learn's and joblib's
#: (an estimator's ``fit`` is reached through scikit-learn's wrappers, and through its
#: model selection, which runs on joblib, when the user calls ``cross_val_score``).
_LIBRARIES = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
                   for path in (__file__, sklearn.__file__, joblib.__file__))


def warn(message, category):
    """``warnings.warn`` with the stack level of the first frame outside skgp_sparse,
    scikit-learn and joblib: the warning names the user's call (``reg.fit(X, y)``), as a
    warning about what that call did should. (In a joblib worker process there is no such
    frame; the warning then names the outermost one.)"""
    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARIES):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
