"""The plan of a fit: what it does, decided once from the settings, the model and the rows.

Whether the fit is one batch or a stream of minibatches, the rows of a step, whether
and on how many rows an exact search starts it, how q(u) is settled after the stream,
the features' scales, and where the training arrays live, are each decided here, once
per ``fit`` or ``partial_fit`` call, by :func:`plan_fit` or :func:`plan_pass`. The
pipeline (:mod:`.pipeline`, :mod:`.training`) and the rows it cuts read the
:class:`FitPlan` instead of deciding again from the estimator's parameters.
"""

from dataclasses import dataclass

import numpy as np

from ..bases import SEARCH_BASIS
from ..optim.qsolver import q_solver

#: Rows per chunk of :func:`feature_scale`'s second pass.
SCALE_CHUNK = 65536


#: Rows of the exact search that starts a fresh minibatch fit (see
#: :func:`.search.search_hyperparameters`): at most this many random rows. More rows cost
#: search time, and no size was best on every set (docs/constants.md).
SEARCH_ROWS = 2048

#: batch_size="auto": data sets of at most this many rows whose one batch is the search of
#: the collapsed bound (a Gaussian likelihood) are fitted that way, others in batches of
#: AUTO_BATCH_SIZE rows. It is the rows of the stream's own exact search (SEARCH_ROWS): up
#: to there one batch is that search over every row and the faster, above it the stream is
#: as accurate in less time. The classifier's one batch is no search, only full-batch
#: steps, and keeps the stream (docs/constants.md).
AUTO_FULL_BATCH_ROWS = 2048
AUTO_BATCH_SIZE = 1024

#: Rows of the exact search that starts an LMC's minibatch fit (:func:`lmc_streams`), in
#: place of SEARCH_ROWS; with the shorter second stage and stream of an LMC
#: (:data:`.search.LMC_INDUCING_SEARCH_ITER`, :data:`.training.LMC_STREAM_STEPS`) the
#: search takes half the time, as accurate or more (docs/constants.md).
LMC_SEARCH_ROWS = 1024


@dataclass(frozen=True)
class FitPlan:
    """What one ``fit`` or ``partial_fit`` call does, decided before it starts.

    Attributes
    ----------
    n_rows : int
        Training rows of this call.
    batch_rows : int
        Rows per training step.
    one_batch : bool
        Whether every step reads every row (never for a ``partial_fit`` pass).
    collapsed : bool
        Whether the fit is the quasi-Newton search of the bound with q(u) optimal (one
        batch of a model whose q(u) is optimal in closed form), rather than natural and
        Adam steps.
    steps_per_epoch : int
    search : bool
        Whether an exact search of the hyperparameters on a subset of the rows starts the
        fit (a fresh fit that learns them and is not itself the collapsed search; not a
        many-class stream, see :func:`stream_search_pays`).
    search_rows : int
        Rows that search reads (and the q(u) check after a fit): at most
        :data:`SEARCH_ROWS`, all of them on small data.
    hand_over : bool
        Whether the stream starts from where the search left the model (a one-batch
        fit after a search; see :func:`.search.search_hyperparameters`).
    settle : {"joint", "exact", "damped"} or None
        How q(u) is brought to the final hyperparameters after training: the joint
        closed form of several mixed outputs, exact or damped natural steps; None for
        Adam on q(u).
    check_q : bool
        Whether a fresh fit checks that q(u) did not end far short of its optimum (a
        conjugate likelihood whose q(u) the fit does not set exactly).
    x_scale : ndarray of shape (n_features,)
        Each feature's spread: Adam's unit on the inducing inputs and the unit of their
        search coordinates.
    converts : bool
        Whether the model's state and the targets move to the rows' library, device or
        dtype for training (and the state back to the host after).
    dtype : numpy or Array API dtype
        The floating dtype of the training arrays.
    q_solver : QSolver
        How the model's q(u) reaches its optimum (:mod:`skgp_sparse.optim.qsolver`).
    search_q_solver : QSolver
        How q(u) of the exact search's model (:meth:`~skgp_sparse.elbo.VariationalModel.search_model`)
        reaches its optimum (``PSEUDO``: the search runs in rounds on pseudo-observations);
        the check of q(u) after a fit compares with the same model. None where the call
        neither searches nor checks q(u) (a later ``partial_fit`` pass, a warm start).
    on_search_basis : bool
        Whether the model trains the exact search's basis
        (:data:`~skgp_sparse.bases.SEARCH_BASIS`), so that its q(u) can start from the
        search's.
    lmc : bool
        Whether the fit is an LMC's minibatch stream (:func:`lmc_streams`): its exact
        search reads :data:`LMC_SEARCH_ROWS` rows, and the search's second stage and the
        stream after it are shorter (see :func:`.search.search_hyperparameters` and
        :func:`.training.run_training`).
    """

    n_rows: int
    batch_rows: int
    one_batch: bool
    collapsed: bool
    steps_per_epoch: int
    search: bool
    search_rows: int
    hand_over: bool
    settle: object
    check_q: bool
    x_scale: np.ndarray
    converts: bool
    dtype: object
    q_solver: object
    search_q_solver: object
    on_search_basis: bool
    lmc: bool


def plan_fit(settings, model, rows, weights=None, fresh=True):
    """The plan of ``fit``: ``settings`` (a :class:`.settings.FitSettings`), the model
    to train (its target layout set), its :class:`.rows.Rows`, the rows' ``weights``
    (None: all ones) and whether the fit is ``fresh`` (not a warm start)."""
    solver = q_solver(model, _searches_by_lbfgs(settings))
    batch = batch_rows(settings.batch_size, rows.n_rows, solver.in_one_move)
    one_batch = batch >= rows.n_rows
    collapsed = one_batch and solver.in_one_move
    search = fresh and starts_with_search(model, one_batch, collapsed)
    return _plan(settings, model, solver, rows, batch, one_batch, collapsed, search,
                 hand_over=search and one_batch, check_q=fresh and q_may_fall_short(model),
                 x_scale=feature_scale(rows.sample, rows.of_sample(weights)))


def plan_pass(settings, model, rows, weights=None, fresh=True, x_scale=None):
    """The plan of a ``partial_fit`` pass: as :func:`plan_fit`, for one pass of minibatch
    steps that is never one batch; ``fresh``: the first call of the stream; ``x_scale``:
    the stream's feature spreads (None: this call starts the stream and takes its rows')."""
    batch = batch_rows(settings.batch_size, rows.n_rows, collapses=False)
    search = fresh and starts_with_search(model, False, False, streaming=True)
    if x_scale is None:
        x_scale = feature_scale(rows.sample, rows.of_sample(weights))
    solver = q_solver(model, _searches_by_lbfgs(settings))
    return _plan(settings, model, solver, rows, batch, False, False, search, hand_over=False, check_q=False,
                 x_scale=x_scale)


def _plan(settings, model, solver, rows, batch, one_batch, collapsed, search, hand_over, check_q, x_scale):
    lmc = lmc_streams(model, one_batch)
    return FitPlan(
        n_rows=rows.n_rows, batch_rows=batch, one_batch=one_batch, collapsed=collapsed,
        steps_per_epoch=-(-rows.n_rows // batch), search=search,
        search_rows=min(LMC_SEARCH_ROWS if lmc else SEARCH_ROWS, rows.sample.shape[0]), hand_over=hand_over,
        settle=settling(model), check_q=check_q, x_scale=x_scale, converts=rows.converts, dtype=rows.dtype,
        q_solver=solver, search_q_solver=_search_solver(settings, model) if search or check_q else None,
        on_search_basis=model.basis is SEARCH_BASIS, lmc=lmc,
    )


def search_optimizer(settings):
    """The exact search's optimiser: the user's, or L-BFGS-B (GPR's default)."""
    return settings.optimizer or "fmin_l_bfgs_b"


def _search_solver(settings, model):
    """How q(u) of ``model``'s exact search reaches its optimum (asked of a search copy,
    which only a fit that searches or checks q(u) builds)."""
    return q_solver(model.search_model(model.n_data), _searches_by_lbfgs(settings))


def _searches_by_lbfgs(settings):
    """Whether the searches run L-BFGS-B, which rounds on pseudo-observations need."""
    return search_optimizer(settings) == "fmin_l_bfgs_b"


def lmc_streams(model, one_batch):
    """Whether the fit is an LMC's minibatch stream: several outputs mixed through a learned
    W (``n_latent``), not in one batch (a one-batch LMC is the search of its collapsed bound,
    unchanged). Independent outputs (a fixed W) and single outputs are not."""
    return not one_batch and model.outputs.learned


def batch_rows(batch_size, n_rows, collapses):
    """Rows per step for ``n_rows`` training rows (``batch_size``: int, None or "auto");
    ``collapses``: whether one batch of them would be the search of the collapsed bound
    (False for ``partial_fit``, whose calls are never one)."""
    if batch_size is None or (batch_size == "auto" and collapses and n_rows <= AUTO_FULL_BATCH_ROWS):
        return n_rows
    size = AUTO_BATCH_SIZE if batch_size == "auto" else batch_size
    return min(size, n_rows)


def starts_with_search(model, one_batch, collapsed, streaming=False):
    """Whether a fresh fit of ``model`` starts with the exact search of the
    hyperparameters: it learns them and is not itself a full-batch search of the collapsed
    bound (``streaming``: the first call of ``partial_fit``, which never is); a minibatch
    stream starts with it where it pays (:func:`stream_search_pays`)."""
    if not model.learn_hyperparameters:
        return False
    if streaming or not one_batch:
        return stream_search_pays(model.likelihood)
    return not collapsed


def stream_search_pays(likelihood):
    """Whether a minibatch stream under ``likelihood`` gains by starting from the exact
    search: not under a non-conjugate likelihood of several latent functions (the
    multi-class classifier), whose stream starts from the kernel as given.

    There every evaluation of the search moves the K latents' q(u) by damped natural
    steps on SEARCH_ROWS rows, so the search costs as much as tens of epochs of the
    stream, and it did not pay, even on fewer rows (docs/constants.md). A search on every
    row (one batch) is the fit's own hyperparameter optimiser and stays.
    """
    return likelihood.conjugate or likelihood.n_latent == 1


def settling(model):
    """How q(u) is settled at the final hyperparameters after minibatch training (see
    :attr:`FitPlan.settle`)."""
    if model.solves_q_in_closed_form():
        return "joint"
    if model.natural:
        return "exact" if model.natural_step_is_exact(jointly=False) else "damped"
    return None


def q_may_fall_short(model):
    """Whether the fitted q(u) can end short of its optimum under a conjugate likelihood:
    not where the fit settles it by exact natural steps (the coupled basis) or sets the
    joint q of several outputs in closed form, so that those fits, the defaults among
    them, pay nothing for the check."""
    return model.likelihood.conjugate and not (model.natural_step_is_exact() or model.solves_q_in_closed_form())


def feature_scale(X, sample_weight=None):
    """Spread (standard deviation) of each column of X; 1 for a constant column.

    It sets the default kernel's length scales and the size of Adam's steps on the
    inducing inputs, so that a fit does the same on X and on ``1e6 * X``. With
    ``sample_weight``, the weighted spread: that of X with each row repeated its weight's
    number of times.
    """
    n = X.shape[0]
    if n < 2:
        return np.ones(X.shape[1])
    w = np.ones(n) if sample_weight is None else sample_weight
    total = float(w.sum())
    # Two passes, the second over row chunks: np.std would make two temporaries of X's size.
    mean = (w @ X) / total
    sq = np.zeros(X.shape[1])
    for start in range(0, n, SCALE_CHUNK):
        rows = slice(start, min(start + SCALE_CHUNK, n))
        sq += w[rows] @ ((X[rows] - mean) ** 2)
    scale = np.sqrt(sq / total)
    return np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
