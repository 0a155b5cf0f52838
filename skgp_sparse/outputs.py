"""Output maps: how the latent functions' marginals become the outputs' marginals.

A model (:class:`skgp_sparse.elbo.VariationalModel`) is a list of latent groups, each a
kernel and a basis state, and an output map, which its state names
(:meth:`~skgp_sparse.bases.state.VariationalState.output_map`). The model's bound, its
packing of the learned parameters, its natural steps and its predictor are written once,
against this interface:

- ``groups(state)`` / ``with_groups(state, groups)`` / ``columns(state)``: the groups'
  basis states, a state with new ones, and each group's slice of the latent columns
  (None: all of them);
- ``mix(state, mean_g, var_g)`` and ``unmix(state, d_mean, d_var)``: the outputs'
  marginals from the latents', and the transpose for their adjoints;
- ``gradients``, ``adam_params``, ``set_adam_params``: the map's own parameters;
- ``mixes``, ``learned`` and ``couples(state)``: whether it has a mixing at all, whether
  Adam moves it, and whether it makes the latents meet in the likelihood.

:data:`IDENTITY` is the map of one group whose latents are the outputs (one output,
independent outputs sharing one basis state, a classifier's K latents);
:class:`skgp_sparse.multioutput.outputs.LinearMixing` mixes several groups through W.
"""


class IdentityOutputs:
    """The latents are the outputs: one group, whose basis state is the model's state."""

    #: No mixing matrix, so nothing of the several-output closed forms applies.
    mixes = False
    #: No parameters of its own.
    learned = False
    #: The quasi-Newton memory of the exact search (scipy's default, which scikit-learn's
    #: GPR also uses).
    SEARCH_MEMORY = 10

    def groups(self, state):
        """The one group: the state itself."""
        return (state,)

    def with_groups(self, state, groups):
        """The state made of ``groups`` (one)."""
        return groups[0]

    def columns(self, state):
        """Every latent column belongs to the one group: None, the adjoints' arrays
        themselves (a basis keys caches on them by identity, which a view would miss)."""
        return (None,)

    def couples(self, state):
        """Never: the latents meet nowhere."""
        return False

    def mix(self, state, mean_g, var_g):
        return mean_g, var_g

    def unmix(self, state, d_mean, d_var):
        return d_mean, d_var

    def gradients(self, state, d_mean, d_var, mean_g, var_g):
        return {}

    def adam_params(self, state):
        return {}

    def set_adam_params(self, state, params):
        pass

    def forget_joint(self, state):
        """Nothing to forget: one group has no joint covariance apart from its own."""

    def joint_kl(self, state):
        return None

    def joint_variances(self, model, X):
        return None

    def predictor(self, model, parts):
        """The one group's predictor."""
        return parts[0]

    def search_state(self, state, groups):
        return groups[0]

    def __reduce__(self):
        # One instance: a pickled model's map is the same object after loading.
        return "IDENTITY"


#: The map of every model with one latent group.
IDENTITY = IdentityOutputs()
