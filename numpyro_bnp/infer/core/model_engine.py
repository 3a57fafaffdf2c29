"""What the streaming engines of this library that read a user's model share: the record of the
model they read, pickling, checkpoints and the start of a run (:class:`ModelEngine`)."""

import numpy as np

from numpyro_bnp._checks import FixedOptions
from numpyro_bnp.infer.core import checkpoint, streaming
from numpyro_bnp.infer.core.model import model_cache_key


class ModelEngine(FixedOptions):
    """What the streaming engines that read a user's model share.

    A subclass sets ``self.spec`` (the model it read, with ``model_args``, ``model_kwargs`` and
    ``site_summary``) in its ``_read_model(model_args, model_kwargs)``, and has ``options`` (a
    dict of JSON-storable values, its constructor's keyword arguments besides ``model``) and
    ``fixed_options`` (``"model"`` and the names of ``options``).
    """

    spec = None
    _spec_key = None

    @property
    def model_args(self):
        """Positional model arguments the engine read the model with (``None`` before)."""
        return None if self.spec is None else self.spec.model_args

    @property
    def model_kwargs(self):
        """Keyword model arguments the engine read the model with (``None`` before)."""
        return None if self.spec is None else dict(self.spec.model_kwargs)

    @property
    def model_summary(self):
        """One line per site of the traced model (name, distribution, shape)."""
        self._require_init()
        return tuple(self.spec.site_summary)

    def _read(self, model_args, model_kwargs):
        """Read the model with ``model_args``/``model_kwargs`` (``num_obs`` filled in, see
        :func:`~numpyro_bnp.infer.core.streaming.model_arguments`) by the subclass's
        ``_read_model``. The compiled functions bake in the model's constants: the read (and its
        trace) is skipped when the arguments equal, by value, those of the last read (see
        :func:`~numpyro_bnp.infer.core.model.model_cache_key`)."""
        model_kwargs = streaming.model_arguments(self.model, model_args, model_kwargs)
        key = model_cache_key(self.model, model_args, model_kwargs)
        if key is not None and key == self._spec_key:
            return
        self._read_model(model_args, model_kwargs)
        self._spec_key = key

    def _require_init(self):
        if self.spec is None:
            name = type(self).__name__
            raise RuntimeError(f"call {name}.init(rng_key, *model_args, **model_kwargs) first")

    def __getstate__(self):
        # the compiled functions and the read model are not pickled (closures); the model
        # function is pickled by reference and read again, with the same arguments, on load
        state = {name: self.__dict__[name] for name in self.fixed_options}
        state["model_read"] = None if self.spec is None else (self.model_args, self.model_kwargs)
        return state

    def __setstate__(self, state):
        state = dict(state)
        read = state.pop("model_read")
        self.__dict__.update(state, spec=None, _spec_key=None)
        if read is not None:
            self._read(*read)

    @classmethod
    def from_checkpoint(cls, model, path, *model_args, **model_kwargs):
        """Rebuild the engine recorded in a checkpoint and read its state: ``(engine, state)``.

        The engine gets the options recorded when the state was saved and reads ``model`` with
        the recorded model arguments; resume with ``engine.run(key, data, init_state=state)``
        (which may leave out the model arguments: the engine keeps the ones it read).
        Arguments passed here must equal the recorded ones (see
        :func:`~numpyro_bnp.infer.core.streaming.resume_arguments`); those recorded as not storable
        must be passed.

        :raises ValueError: when the checkpoint is not this engine's, an argument passed
            differs from the recorded one, or the traced model's sites (names, distributions,
            shapes), kind or dimension differ from the recorded model's.
        """
        record = checkpoint.read_checkpoint(path)
        if record["engine"] != cls.__name__:
            raise ValueError(f"{path} holds a state of {record['engine']}, not of {cls.__name__}")
        if record["options"] is None:
            raise ValueError(
                f"{path} does not record the engine's options (written by an older version); "
                "build the engine and read the state with its load method"
            )
        args, kwargs = checkpoint.resume_arguments(record, model_args, model_kwargs, path=path)
        options = dict(record["options"])
        options["dtype"] = np.dtype(options["dtype"])
        engine = cls(model, **options)
        engine.init(None, *args, **kwargs)
        checkpoint.check_model_summary(record, engine, path=path)
        return engine, checkpoint.load(path, engine)

    def load(self, path, *model_args, **model_kwargs):
        """Read a state saved by the result's ``save`` to resume the stream in this engine.

        The model is read from ``model_args``/``model_kwargs`` when given (else the engine
        must have read it, by ``init`` or ``run``); the checkpoint must come from the same
        engine class with the same model kind and dtype, and its state must pass
        ``check_state`` (see :func:`~numpyro_bnp.infer.core.streaming.load`).
        """
        if model_args or model_kwargs:
            self.init(None, *model_args, **model_kwargs)
        self._require_init()
        return checkpoint.load(path, self)

    def _stream(self, rng_key, data, model_args, model_kwargs, init_state, **run_options):
        """``(final state, traces, time)`` of :func:`~numpyro_bnp.infer.core.streaming.run` over
        ``data`` from :meth:`_start`'s state; the capacity grows when the engine's
        ``capacity_option`` is ``None``. ``run_options``: ``chunk_size``, ``progress_bar``,
        ``trace_every``."""
        state = self._start(rng_key, model_args, model_kwargs, init_state)
        growable = getattr(self, self.capacity_option) is None
        return streaming.run(self, state, data, growable=growable, **run_options)

    def _start(self, rng_key, model_args, model_kwargs, init_state):
        """The state a ``run`` starts from: ``init_state`` (checked) or a fresh ``init``; with
        no model arguments, an engine that has read its model keeps it."""
        if init_state is not None and self.spec is not None and not (model_args or model_kwargs):
            state = None  # resuming in an engine that has read its model (from_checkpoint)
        else:
            state = self.init(rng_key, *model_args, **model_kwargs)
        if init_state is not None:
            self.check_state(init_state, "init_state")
            state = init_state
        return state
