"""Host-side checks of the R-IBP filter: the model's constants and a state that resumes a stream.

Functions called by :class:`~numpyro_bnp.infer.RIBPFilter` when it reads its model (``init``)
and by :meth:`RIBPFilter.check_state` (before a stream resumes from a state, and in
:func:`numpyro_bnp.infer.core.streaming.save` and :func:`~numpyro_bnp.infer.core.streaming.load`);
they raise naming the offending constant or field.
"""

import numpy as np

from numpyro_bnp._checks import finite_in_dtype


def check_constants(spec, dtype):
    """Raise ``ValueError`` when a constant of the read model ``spec`` is not usable in ``dtype``.

    The IBP's ``alpha`` and ``beta``, the feature prior's mean and variance, the noise variance
    and precision, and the weight prior's mean and variance must be finite in ``dtype`` (the
    variances, precision, ``alpha`` and ``beta`` also positive there), see
    :func:`numpyro_bnp._checks.finite_in_dtype`.
    """
    # constants finite in float64 can overflow or vanish in the working dtype (σ = 1e20
    # squared, 1/σ² for σ = 1e-30 in float32) and would turn the whole state into NaN
    obs, feat = repr(spec.obs_site), repr(spec.feature_site)
    constants = [
        (spec.alpha, f"alpha of the RecursiveIBP site {spec.ibp_site!r}", True),
        (spec.beta, f"beta of the RecursiveIBP site {spec.ibp_site!r}", True),
        (spec.feature_loc, f"the prior mean of the feature site {feat}", False),
        (spec.feature_var, f"the prior variance of the feature site {feat}", True),
    ]
    if spec.noise_var is not None:
        with np.errstate(divide="ignore"):
            noise_prec = 1.0 / spec.noise_var
        constants += [
            (noise_prec, f"the noise precision 1/σ² of the observed site {obs}", True),
            (spec.noise_var, f"the noise variance σ² of the observed site {obs}", True),
        ]
    if spec.weight_site is not None:
        weight = repr(spec.weight_site)
        constants += [
            (spec.weight_loc, f"the prior mean of the weight site {weight}", False),
            (spec.weight_var, f"the prior variance of the weight site {weight}", True),
        ]
    for value, name, positive in constants:
        finite_in_dtype(value, name, dtype=dtype, positive=positive)


def check_state(filt, state, name):
    """:meth:`RIBPFilter.check_state` of a set-up filter ``filt``; raises naming the field."""
    state_type = filt.state_type
    if not isinstance(state, state_type):
        raise TypeError(f"{name} must be an {state_type.__name__}, got {type(state).__name__}")
    fields = {field: np.asarray(value) for field, value in state._asdict().items()}
    mean = fields["mean"]
    if mean.ndim != 2 or mean.shape[0] < 1 or mean.shape[1] != filt.dim:
        raise ValueError(
            f"{name}.mean must have shape (K, {filt.dim}) for the model's D = {filt.dim}, "
            f"got {mean.shape}"
        )
    capacity, dim = mean.shape
    shapes = {
        "mean": (capacity, dim),
        "var": (capacity, dim),
        "running_sum": (capacity,),
        "existence": (capacity,),
        "num_seen": (),
        "truncation": (),
    }
    if "buffer" in fields:  # the memoized update's statistics and buffer
        rows = fields["buffer"].shape[0] if fields["buffer"].ndim == 2 else -1
        bernoulli = filt.kind == "bernoulli"  # per-column statistics with a constant term
        shapes.update(
            gram=(dim, capacity + 1, capacity + 1) if bernoulli else (capacity, capacity),
            cross=(capacity + bernoulli, dim),
            born=(capacity,),
            buffer=(filt.memo_options.buffer_size, dim),
            buffer_prec=(rows, dim if bernoulli else 0),
            obs_moment=(dim,),
            hyper=(0 if filt.spec.hyper is None else filt.spec.hyper.init.size,),
            **{
                f: (rows, capacity)
                for f in ("buffer_logit", "buffer_use", "buffer_coef", "buffer_moment")
            },
        )
    for field, shape in shapes.items():
        value = fields[field]
        if value.shape != shape:
            raise ValueError(
                f"{name}.{field} must have shape {shape} (K = {capacity} slots, from "
                f"{name}.mean), got {value.shape}"
            )
        want = {"num_seen": np.dtype(np.int32), "born": np.dtype(bool)}.get(
            field, np.dtype(filt.dtype)
        )
        if value.dtype != want:
            raise ValueError(
                f"{name}.{field} must have dtype {want} (the filter's dtype), got {value.dtype}"
            )
        if not np.isfinite(value).all():
            raise ValueError(f"{name}.{field} holds NaN or infinite values")
    ranges = {
        "var": (fields["var"] > 0, "> 0"),
        "running_sum": (fields["running_sum"] >= 0, ">= 0"),
        "existence": ((fields["existence"] >= 0) & (fields["existence"] <= 1), "in [0, 1]"),
        "num_seen": (fields["num_seen"] >= 0, ">= 0"),
        "truncation": ((fields["truncation"] >= 0) & (fields["truncation"] <= 1), "in [0, 1]"),
    }
    for field, (ok, what) in ranges.items():
        if not np.all(ok):
            bad = fields[field].reshape(-1)[np.argmin(np.reshape(ok, -1))].item()
            raise ValueError(f"{name}.{field} must be {what}, got {bad!r}")
    if filt.max_features is not None and capacity != filt.max_features:
        raise ValueError(
            f"{name} has {capacity} slots but the filter fixes max_features="
            f"{filt.max_features}; build the filter with max_features={capacity}, or None "
            "to let the capacity grow"
        )
