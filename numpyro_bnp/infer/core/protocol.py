"""The protocol a streaming engine follows, and its check (see
:mod:`numpyro_bnp.infer.core.streaming`).

Besides ``init`` and the pure, jittable ``update(state, obs) -> (state, info)`` for one
observation, an engine has the members of :class:`StreamingEngine`; :func:`check_engine` is
called by the streaming loop and by the checkpoint functions
(:mod:`numpyro_bnp.infer.core.checkpoint`) before they use one.
"""

from typing import Any, Protocol

import numpy as np


class StreamingEngine(Protocol):
    """What the streaming loop, the checkpoints and the results ask of an engine.

    Read by :func:`~numpyro_bnp.infer.core.streaming.run`,
    :func:`~numpyro_bnp.infer.core.streaming.save`,
    :func:`~numpyro_bnp.infer.core.streaming.load` and
    :class:`~numpyro_bnp.infer.core.streaming.StreamingResult`.

    The attributes are read after the engine has been set up (``init``):

    :ivar dim: size ``D`` of one observation.
    :ivar dtype: floating dtype of the state and of the observations.
    :ivar kind: the model variant a state belongs to (recorded in checkpoints; a state of one
        kind does not resume in an engine of another).
    :ivar state_type: the state's ``NamedTuple`` class.
    :ivar progress_key: the info field shown in the progress bar ...
    :ivar progress_label: ... under this label (e.g. ``"features"``, ``"clusters"``).
    :ivar capacity_option: the engine's option that fixes the capacity (named in the
        truncation warning), e.g. ``"max_features"``.

    A batch (what :meth:`check_batch` returns) is an array with one row per observation, or a
    ``NamedTuple`` of such arrays with a common leading axis (e.g. documents as
    :class:`~numpyro_bnp.families.SparseCounts`); the loop pads and concatenates rows with zeros
    along their trailing axes, so padding a row with zeros must not change the observation.
    A state is a ``NamedTuple`` of arrays, which may nest ``NamedTuple`` s of arrays (e.g. the
    parameters of a conjugate family); checkpoints store its leaves by their paths.

    Optional, for checkpoints that rebuild the engine
    (:func:`~numpyro_bnp.infer.core.streaming.save`,
    :func:`~numpyro_bnp.infer.core.streaming.read_checkpoint`):

    :ivar options: the engine's options (JSON-storable values).
    :vartype options: dict
    :ivar model_args: positional model arguments the engine was set up with.
    :vartype model_args: tuple
    :ivar model_kwargs: keyword model arguments the engine was set up with.
    :vartype model_kwargs: dict
    :ivar model_summary: strings that describe the traced model (one per site).
    :vartype model_summary: tuple
    """

    dim: int
    dtype: Any
    kind: str
    state_type: type
    progress_key: str
    progress_label: str
    capacity_option: str

    def check_batch(self, batch, name: str = "batch") -> np.ndarray:
        """Validate a batch on the host; return it as ``(n, dim)`` of ``dtype`` (or raise)."""

    def check_state(self, state, name: str = "state") -> None:
        """Raise ``TypeError``/``ValueError`` naming the field when ``state`` cannot resume here."""

    def scan_chunk(self, state, chunk, valid):
        """``(state, infos)`` after the valid rows of ``chunk`` (see
        :func:`~numpyro_bnp.infer.core.streaming.chunk_scanner`)."""

    def capacity(self, state) -> int:
        """The state's capacity (slots, clusters)."""

    def empty(self, capacity: int):
        """A state with nothing absorbed and ``capacity`` slots (its structure is what
        :func:`~numpyro_bnp.infer.core.streaming.load` fills in)."""

    def grow(self, state, capacity: int):
        """``state`` with its capacity raised to ``capacity`` (outside ``jit``)."""

    def truncated(self, state) -> bool:
        """Whether the state's capacity is too small (the chunk is re-run after :meth:`grow`)."""

    def num_seen(self, state) -> int:
        """Observations absorbed by ``state``."""

    def posterior_draws(self, rng_key, state, num_draws: int, obs=None):
        """``(draws, dims, coords)`` for :meth:`~numpyro_bnp.infer.StreamingResult.to_arviz`:
        ``num_draws`` independent draws of each latent site (leading axis), with rows-dependent
        sites (e.g. the IBP matrix) for the rows ``obs`` when given."""

    def posterior_samples(self, rng_key, state, num_samples: int, num_obs=None, obs=None):
        """Samples keyed by the model's site names for :class:`numpyro.infer.Predictive`."""


#: what a checkpoint (save, load) asks of an engine; a batch engine such as
#: :class:`~numpyro_bnp.infer.PowerPriorSVB` has these but no row-by-row scan
CHECKPOINT_MEMBERS = (
    "dim",
    "dtype",
    "kind",
    "state_type",
    "check_batch",
    "check_state",
    "capacity",
    "empty",
    "num_seen",
)
#: what the row-streaming loop asks of an engine
ENGINE_MEMBERS = (
    *CHECKPOINT_MEMBERS,
    "progress_key",
    "progress_label",
    "capacity_option",
    "scan_chunk",
    "grow",
    "truncated",
)


def check_engine(engine, members=ENGINE_MEMBERS):
    """Raise ``TypeError`` naming the ``members`` of the protocol that ``engine`` lacks."""
    missing = [m for m in members if not hasattr(engine, m)]
    if missing:
        raise TypeError(
            f"engine must follow the StreamingEngine protocol (set up by its init); "
            f"{type(engine).__name__} lacks {missing}"
        )
