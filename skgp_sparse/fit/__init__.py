"""The fit pipeline: from the estimator's frozen settings and its validated training rows
to a trained model (docs/design.md, "The fit as a package of its own").

:mod:`.settings` (the parameters the fit reads), :mod:`.placement` (where it runs),
:mod:`.rows` (the training rows), :mod:`.plan` (what one call does, decided once),
:mod:`.jitter`, :mod:`.search` (the exact searches), :mod:`.training` (the stream and the
settling of q(u)), :mod:`.report` (warnings
about a finished fit) and :mod:`.pipeline` (the stages in order: ``run_fit``,
``run_partial_fit``). Nothing here takes or imports an estimator.
"""
