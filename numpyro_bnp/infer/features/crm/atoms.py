r"""The atoms of a CRM series representation and their count law, for :class:`CRMSlice`.

The prior side of the slice sampler (Zhu, Bouchard-Côté & Campbell 2020; steps 2, 5 and 6 of the
sweep in :mod:`numpyro_bnp.infer.features.crm.slice` and ``docs/crm_slice.md``, "What one sweep
does"): atoms
``θ_k = τ(V_k, Γ_k)`` of a series representation over the arrivals ``Γ_1 < Γ_2 < …`` of a
unit-rate Poisson process with marks ``V_k`` (stored as the uniform coordinates
``P_k = F_G(V_k)``), the count law ``h(x | θ)`` (Bernoulli, Poisson or negative binomial), the
next atom of the tail that no row uses (thinning), and the Metropolis moves of the arrivals and
the marks given the count matrix; and a draw of the whole state from the prior
(:meth:`AtomSeries.draw_prior`, ``CRMSlice(start="prior")``).

Representations (:meth:`numpyro_bnp.distributions.CompletelyRandomMeasure.series`):
``"bondesson"`` ``θ = V e^{-Γ/c}``; ``"inverse_levy"`` ``θ = N^{-1}(Γ)`` (no marks);
``"rejection"`` ``θ = ν̃^{-1}(Γ)`` kept when the mark ``V ~ Unif(0, 1)`` is below
``dν/dν̃(θ)``, 0 otherwise — a rejected atom is one no row can use, and its mark moves like a
Bondesson mark, so it can be accepted later.

The log density of the sampler's state (:meth:`AtomSeries.log_arrivals`,
:meth:`AtomSeries.log_counts`, :meth:`AtomSeries.log_no_later_use`; assembled by
:func:`numpyro_bnp.infer.features.crm.target.log_joint`) is taken in the sampler's own coordinates:
the arrivals ``Γ_1 < … < Γ_K`` of the instantiated atoms (Lebesgue measure), their uniform marks
``P_k`` (Lebesgue on ``(0, 1)``, density 1) and the counts (counting measure).

**The mass.** Every CRM here has a Lévy measure proportional to its mass, ``ν_α = α ν_1``, and
every series scales with it: ``τ_α(V, Γ) = τ_1(V, Γ/α)`` (Bondesson's constant is ``α`` times
that of the unit mass, ``N_α^{-1}(Γ) = N_1^{-1}(Γ/α)``, and so for the dominating measure of the
rejection series). :meth:`AtomSeries.at_mass` gives the series at another (traced) mass, and
:func:`mass_conditional` the exact conditional of the mass given the atoms.
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import lax, random
from jax.scipy.special import gammaln, xlog1py, xlogy

from numpyro_bnp._math import logit
from numpyro_bnp.distributions.crm import BetaProcess, _composite_rule
from numpyro_bnp.infer.core.mcmc import slice_sample

__all__ = ["AtomSeries", "draw_mass", "mass_conditional", "with_mass"]

_TAIL_SPAN = 60.0  # log-atom range of the quadrature of Λ below its upper limit
#: a prior draw stops where the atoms after the last one have expected use below this
_PRIOR_TAIL = 1e-4


class AtomSeries:
    """Atoms of ``crm`` in a series representation, with the count law ``h``.

    :param crm: the CRM prior (a :class:`~numpyro_bnp.distributions.CompletelyRandomMeasure`).
    :param str representation: ``"bondesson"``, ``"inverse_levy"`` or ``"rejection"``.
    :param str likelihood: count law ``h``: ``"bernoulli"``, ``"poisson"`` or
        ``"negative_binomial"``.
    :param total_count: ``(N,)`` negative-binomial totals ``r_n`` (``None`` otherwise).
    :param int num_rows: ``N``.
    :param dtype: float dtype of the arrays.
    :param int n_gamma, gamma_step, n_marks, mark_step: see :class:`CRMSlice`.
    """

    def __init__(
        self,
        crm,
        representation,
        likelihood,
        total_count,
        num_rows,
        dtype,
        *,
        n_gamma,
        gamma_step,
        n_marks,
        mark_step,
    ):
        self.crm = jax.tree.map(lambda x: jnp.asarray(x, dtype), crm)
        self.representation = representation
        self.likelihood = likelihood
        self.total_count = None if total_count is None else jnp.asarray(total_count, dtype)
        self.trials = float(num_rows) if total_count is None else float(jnp.sum(total_count))
        self.dtype = dtype
        self.n_gamma, self.gamma_step = n_gamma, gamma_step
        self.n_marks, self.mark_step = n_marks, mark_step
        unit_beta = isinstance(crm, BetaProcess) and float(crm.concentration) == 1.0
        self._mass = float(crm.mass)
        if representation == "bondesson":
            self.scale = float(crm._bondesson_constant_and_quantile(jnp.asarray(0.5, dtype))[0])
            self.fixed_marks = unit_beta  # V ~ Beta(1, 0) = δ_1
        else:
            self.scale = float(crm.mass)
            self.fixed_marks = representation == "inverse_levy"
        #: the atoms decrease with k (the inverse-Lévy series, or Bondesson with fixed marks)
        self.decreasing = representation == "inverse_levy" or (
            representation == "bondesson" and unit_beta
        )
        self._bounded = bool(np.isfinite(crm.upper))  # beta-process atoms lie in (0, 1)
        # atoms above this level have expected number e^{-46}: the upper limit of Λ's integral
        top = float(self.crm._inverse_tail(jnp.asarray(-46.0, dtype)))
        if self._bounded:  # below 1 in the dtype (ν with λ = 1 has mass e^{-46} only at 1 - 1e-20)
            top = min(top, 1.0 - float(jnp.finfo(dtype).eps))
        self._log_top = float(logit(top) if self._bounded else np.log(top))

    def at_mass(self, mass):
        """This series at the CRM mass ``mass`` (a scalar, may be traced): the same representation
        and count law with ``ν`` scaled by ``mass / α`` (module docstring, "The mass").

        The upper limit of the quadrature of ``Λ`` stays that of the mass the series was built
        with: the atoms above it have expected number ``e^{-46}`` times the ratio of the masses.
        """
        mass = jnp.asarray(mass, self.dtype)
        series = copy.copy(self)
        series.crm = with_mass(self.crm, mass)
        series.scale = self.scale * mass / self._mass
        return series

    def theta(self, gamma, marks):
        """Atom ``θ = τ(V, Γ)`` of the series representation (any shape)."""
        if self.representation == "bondesson":
            c, v = self.crm._bondesson_constant_and_quantile(marks)
            return v * jnp.exp(-gamma / c)
        if self.representation == "rejection":
            return self.crm._rejection_atoms(gamma[..., None], marks[..., None])[..., 0]
        return self.crm._inverse_tail(jnp.log(gamma))

    def column_loglik(self, theta, total):
        """``Σ_n log h(X_nk | θ)`` up to θ-free terms, from the column sum ``total = Σ_n X_nk``."""
        if self.likelihood == "bernoulli":
            return xlogy(total, theta) + (self.trials - total) * jnp.log1p(-theta)
        if self.likelihood == "poisson":
            return xlogy(total, theta) - self.trials * theta
        return xlogy(total, theta) + self.trials * jnp.log1p(-theta)

    def entry_logh(self, x, theta):
        """``log h(x | θ)`` up to x-free terms, per row: ``x`` ``(N,)`` counts."""
        xf = x.astype(self.dtype)
        if self.likelihood == "bernoulli":
            return jnp.where(x > 0, jnp.log(theta), jnp.log1p(-theta))
        logh = xlogy(xf, theta) - gammaln(xf + 1.0)
        if self.likelihood == "negative_binomial":
            logh = logh + gammaln(xf + self.total_count)
        return logh

    def log_counts(self, x, theta):
        """``Σ_{n,k} log h(X_nk | θ_k)``, normalised: ``x`` ``(N, C)`` counts, ``theta`` ``(C,)``.

        Columns with ``θ_k = 0`` and no count add 0 (empty slots of the buffer, rejected atoms).
        """
        xf = x.astype(self.dtype)
        if self.likelihood == "bernoulli":
            return jnp.sum(xlogy(xf, theta) + xlog1py(1.0 - xf, -theta))
        if self.likelihood == "poisson":
            return jnp.sum(xlogy(xf, theta) - theta - gammaln(xf + 1.0))
        r = self.total_count[:, None]
        return jnp.sum(
            gammaln(xf + r)
            - gammaln(r)
            - gammaln(xf + 1.0)
            + xlogy(xf, theta)
            + r * jnp.log1p(-theta)
        )

    @staticmethod
    def log_arrivals(last_arrival):
        """``log p(Γ_1, …, Γ_K) = -Γ_K``: the first ``K`` arrivals of a unit-rate Poisson process
        (0 for ``K = 0``, ``Γ_0 = 0``)."""
        return -last_arrival

    def log_no_later_use(self, last_arrival, last_theta, num_atoms):
        r"""``log P(no row uses an atom after the K-th | Γ_K) = -Λ``: the tail the sampler keeps
        integrated out.

        The atoms after the ``K``-th arrival are a Poisson process, and so are those of them that
        some row uses (thinning); the probability that there is none is ``exp(-Λ)``, ``Λ`` their
        expected number (Kingman, *Poisson processes*, 1993; the thinned tail of sweep step 2):
        ``Λ = ∫_{Γ_K}^∞ E_V[1 - h_0(τ(V, u))] du`` with ``h_0(θ) = Π_n h(0 | θ)``. In the atom
        ``θ`` this is

        .. math::
            Λ = \int_0^x \big(1 - h_0(ρ θ)\big)\, ν(dθ),

        with ``x = θ_K``, ``ρ = 1`` for inverse Lévy (``u = N(θ)``) and rejection (``u = Ñ(θ)``
        thinned by ``dν/dν̃``; the ``K``-th atom is used, hence accepted), ``x`` = the largest
        possible atom for ``K = 0``; and ``x`` = the largest possible atom, ``ρ = e^{-Γ_K/c}`` for
        Bondesson (the atoms after ``Γ_K`` are a copy of the whole series scaled by ``ρ``).
        Composite Gauss–Legendre in ``log θ`` (``logit θ`` for beta-process atoms) over the
        :data:`_TAIL_SPAN` below ``x`` (atoms whose expected number above is under ``e^{-46}``
        left out); below it ``1 - h_0(ρθ)`` is ``ρθ`` times the number of trials (``N``, or
        ``Σ_n r_n`` for negative-binomial counts) to first order, which leaves
        ``ρ · trials · ∫_0^{θ_lo} θ ν(dθ)``
        (:meth:`~numpyro_bnp.distributions.CompletelyRandomMeasure.expected_mass_below`).

        :param last_arrival: ``Γ_K`` (0 for ``K = 0``); :param last_theta: ``θ_K``;
        :param num_atoms: ``K``. Scalars; returns ``-Λ``, a scalar.
        """
        crm, dtype = self.crm, self.dtype
        if self.representation == "bondesson":
            log_hi = jnp.asarray(self._log_top, dtype)
            scale = jnp.exp(-last_arrival / self.scale)
        else:
            some = (num_atoms > 0) & (last_theta > 0)  # (a rejected last atom: density 0)
            safe = jnp.where(some, last_theta, 0.5)
            log_x = logit(safe) if self._bounded else jnp.log(safe)
            log_hi = jnp.where(some, jnp.minimum(log_x, self._log_top), self._log_top)
            scale = jnp.ones((), dtype)
        log_lo = jnp.maximum(log_hi - _TAIL_SPAN, np.log(jnp.finfo(dtype).tiny) + 20.0)
        nodes, weights = (jnp.asarray(v, dtype) for v in _composite_rule())
        s = log_lo + (log_hi - log_lo) * nodes
        if self._bounded:  # θ = σ(s), dθ/ds = θ (1 - θ)
            theta = jax.nn.sigmoid(s)
            log_jacobian = jax.nn.log_sigmoid(s) + jax.nn.log_sigmoid(-s)
        else:  # θ = e^s
            theta, log_jacobian = jnp.exp(s), s
        used = -jnp.expm1(self.column_loglik(scale * theta, 0.0))  # 1 - h_0(ρθ)
        integrand = used * jnp.exp(log_jacobian + crm.levy_log_density(theta))
        theta_lo = jax.nn.sigmoid(log_lo) if self._bounded else jnp.exp(log_lo)
        below = self.trials * scale * crm.expected_mass_below(theta_lo)
        return -((log_hi - log_lo) * jnp.sum(weights * integrand) + below)

    def thin(self, key, start):
        """Next atom of the tail beyond ``start`` that no row uses: ``(Γ, P)`` (sweep step 2)."""

        def cond(carry):
            return ~carry[3]

        def body(carry):
            key, u, _, _ = carry
            key, k_gap, k_mark, k_acc = random.split(key, 4)
            u = u + random.exponential(k_gap, (), self.dtype)
            mark = random.uniform(k_mark, (), self.dtype, minval=1e-7, maxval=1.0 - 1e-7)
            log_accept = self.column_loglik(self.theta(u, mark), 0.0)
            accept = jnp.log(random.uniform(k_acc, (), self.dtype)) < log_accept
            return key, u, mark, accept

        init = (key, start, jnp.asarray(0.5, self.dtype), jnp.zeros((), bool))
        _, u, mark, _ = lax.while_loop(cond, body, init)
        return u, mark

    def draw_counts(self, key, theta, num_rows):
        """``(N,)`` counts ``X_nk ~ h(· | θ)`` of one atom ``θ`` (a scalar) for ``num_rows`` rows
        (negative binomial as its Gamma–Poisson mixture, rate ``Gamma(r_n) θ / (1 - θ)``)."""
        if self.likelihood == "bernoulli":
            return (random.uniform(key, (num_rows,), self.dtype) < theta).astype(jnp.int32)
        rate = jnp.broadcast_to(theta, (num_rows,))
        if self.likelihood == "negative_binomial":
            k_gamma, key = random.split(key)
            odds = theta / jnp.where(theta < 1.0, 1.0 - theta, 1.0)
            rate = random.gamma(k_gamma, self.total_count, dtype=self.dtype) * odds
        return random.poisson(key, rate, (num_rows,)).astype(jnp.int32)

    def draw_prior(self, key, num_rows, capacity):
        r"""A draw of the state from the prior: the atoms in series order, each row's counts
        ``X_nk ~ h(· | θ_k)``, up to the last atom some row uses (the atoms after it belong to
        the tail the sampler integrates out).

        Atoms are drawn one after the other (gaps ``Exp(1)``, uniform marks) until the atoms
        after the current one have expected use ``Λ`` (:meth:`log_no_later_use`) below
        ``1e-4``: the draw is exact up to that probability of a later used atom. An atom used
        beyond the ``capacity`` slots is left out and the draw reported ``truncated``, as is
        a draw still unfinished after ``64 capacity`` atoms.

        :returns: ``(x, arrivals, marks, num_atoms, truncated)``: ``(N, C)`` int32 counts,
            ``(C,)`` arrivals (0 beyond ``num_atoms``) and marks (0.5 beyond), the number of
            instantiated atoms (the last used one) and a bool.
        """
        dtype, limit = self.dtype, 64 * capacity

        def unfinished(carry):
            k, tail = carry[0], carry[-1]
            return (tail > _PRIOR_TAIL) & (k < limit)

        def next_atom(carry):
            k, key, u, x, arrivals, marks, num_atoms, lost, _ = carry
            key, k_gap, k_mark, k_counts = random.split(key, 4)
            u = u + random.exponential(k_gap, (), dtype)
            mark = random.uniform(k_mark, (), dtype, minval=1e-7, maxval=1.0 - 1e-7)
            theta = self.theta(u, mark)
            counts = self.draw_counts(k_counts, theta, num_rows)
            used, inside = jnp.any(counts > 0), k < capacity
            slot = jnp.minimum(k, capacity - 1)
            x = x.at[:, slot].set(jnp.where(inside, counts, x[:, slot]))
            arrivals = arrivals.at[slot].set(jnp.where(inside, u, arrivals[slot]))
            marks = marks.at[slot].set(jnp.where(inside, mark, marks[slot]))
            num_atoms = jnp.where(used & inside, k + 1, num_atoms)
            tail = -self.log_no_later_use(u, theta, k + 1)
            return k + 1, key, u, x, arrivals, marks, num_atoms, lost | (used & ~inside), tail

        zero = jnp.zeros((), jnp.int32)
        start = (
            zero,
            key,
            jnp.zeros((), dtype),
            jnp.zeros((num_rows, capacity), jnp.int32),
            jnp.zeros(capacity, dtype),
            jnp.full(capacity, 0.5, dtype),
            zero,
            jnp.zeros((), bool),
            -self.log_no_later_use(jnp.zeros((), dtype), jnp.zeros((), dtype), zero),
        )
        _, _, _, x, arrivals, marks, num_atoms, lost, tail = lax.while_loop(
            unfinished, next_atom, start
        )
        kept = jnp.arange(capacity) < num_atoms
        return (
            x,
            jnp.where(kept, arrivals, 0.0),
            jnp.where(kept, marks, 0.5),
            num_atoms,
            lost | (tail > _PRIOR_TAIL),
        )

    def move_arrivals(self, key, gamma, marks, totals, num_atoms):
        """Metropolis on each interior arrival ``Γ_k``, ``k < num_atoms - 1`` (sweep step 5):
        ``(Γ, acceptance rate)``."""
        cap = gamma.shape[0]
        scale = self.gamma_step * self.scale / jnp.sqrt(1.0 + totals)

        def atom(j, carry):
            gamma, accepted, key = carry
            key, sub = random.split(key)
            lo = jnp.where(j > 0, gamma[jnp.maximum(j - 1, 0)], 0.0)
            hi = gamma[jnp.minimum(j + 1, cap - 1)]
            mark, total = marks[j], totals[j]

            def move(i, carry):
                g, accepted, key = carry
                key, k_prop, k_acc = random.split(key, 3)
                walk = g + scale[j] * random.normal(k_prop, (), self.dtype)
                uniform = lo + (hi - lo) * random.uniform(k_prop, (), self.dtype)
                proposal = jnp.where(i % 2 == 0, walk, uniform)
                inside = (proposal > lo) & (proposal < hi)
                safe = jnp.where(inside, proposal, g)
                log_ratio = self.column_loglik(self.theta(safe, mark), total) - self.column_loglik(
                    self.theta(g, mark), total
                )
                accept = inside & (jnp.log(random.uniform(k_acc, (), self.dtype)) < log_ratio)
                return jnp.where(accept, proposal, g), accepted + accept, key

            g, accepted, _ = lax.fori_loop(0, self.n_gamma, move, (gamma[j], accepted, sub))
            return gamma.at[j].set(g), accepted, key

        # interior atoms only: the last one (the sentinel) has no right neighbour
        gamma, accepted, _ = lax.fori_loop(0, num_atoms - 1, atom, (gamma, 0, key))
        moves = jnp.maximum(num_atoms - 1, 0) * self.n_gamma
        rate = jnp.where(moves > 0, accepted / jnp.maximum(moves, 1), 0.0)
        return gamma, rate.astype(self.dtype)

    def move_marks(self, key, gamma, marks, totals, num_atoms):
        """Logit random walk on the marks of the instantiated atoms (sweep step 6): ``(marks,
        acceptance rate)``; the marks unchanged when they are fixed or ``n_marks`` is 0."""
        if self.fixed_marks or self.n_marks == 0:
            return marks, jnp.zeros((), self.dtype)
        live = jnp.arange(marks.shape[0]) < num_atoms

        def move(_, carry):
            marks, accepted, key = carry
            key, k_prop, k_acc = random.split(key, 3)
            step = self.mark_step * random.normal(k_prop, marks.shape)
            prop = jax.nn.sigmoid(logit(marks) + step)
            prop = jnp.clip(prop, 1e-7, 1.0 - 1e-7).astype(self.dtype)
            log_ratio = (
                self.column_loglik(self.theta(gamma, prop), totals)
                - self.column_loglik(self.theta(gamma, marks), totals)
                + jnp.log(prop * (1.0 - prop))
                - jnp.log(marks * (1.0 - marks))
            )
            accept = live & (jnp.log(random.uniform(k_acc, marks.shape, self.dtype)) < log_ratio)
            return jnp.where(accept, prop, marks), accepted + jnp.sum(accept), key

        marks, accepted, _ = lax.fori_loop(0, self.n_marks, move, (marks, 0, key))
        moves = num_atoms * self.n_marks
        rate = jnp.where(moves > 0, accepted / jnp.maximum(moves, 1), 0.0)
        return marks, rate.astype(self.dtype)


def with_mass(crm, mass, name="mass"):
    """The distribution ``crm`` with its parameter ``name`` (a CRM's ``mass``; ``alpha`` of a
    ``RecursiveIBP``) replaced by ``mass``."""
    names = type(crm).gather_pytree_data_fields()
    values, aux = crm.tree_flatten()
    values = tuple(mass if n == name else v for n, v in zip(names, values, strict=True))
    return type(crm).tree_unflatten(aux, values)


def mass_conditional(mass, last_arrival, num_atoms, log_no_later_use):
    r"""The shape and rate increments of the mass's conditional given the atoms.

    In the sampler's coordinates the arrivals ``Γ_k`` are a unit-rate Poisson process whatever
    the mass ``α``, and ``θ_k = τ_1(V_k, Γ_k/α)`` (module docstring, "The mass"). Holding the
    atoms ``θ_k`` fixed, i.e. ``T_k = Γ_k/α``, the ``T_k`` are the arrivals of a Poisson process
    of rate ``α``: ``p(T_1 < … < T_K | α) = α^K e^{-α T_K}``; the counts depend on ``T`` only and
    the tail none of whose atoms a row uses has probability ``e^{-Λ_α(T_K)}`` with
    ``Λ_α = α Λ_1`` (``ν_α = α ν_1``). Hence

    .. math::
        p(α \mid T, V, X, ψ, y) \propto p(α)\, α^K e^{-α S}, \qquad
        S = T_K + Λ_1(T_K) = (Γ_K + Λ_α(Γ_K)) / α,

    conjugate to a ``Gamma(a, b)`` prior: ``α | · ~ Gamma(a + K, b + S)``. After a new ``α'``
    the arrivals become ``Γ' = α' T`` (the atoms do not move).

    :param mass: the current mass ``α``; :param last_arrival: ``Γ_K`` (0 for ``K = 0``);
    :param num_atoms: ``K``; :param log_no_later_use: ``-Λ_α(Γ_K)`` at the current mass
        (:meth:`AtomSeries.log_no_later_use`). Scalars.
    :return: ``(K, S)``: ``log p(α | ·) = log p(α) + K log α - α S + const``.
    """
    rate = (last_arrival - log_no_later_use) / mass
    return jnp.asarray(num_atoms, rate.dtype), rate


def draw_mass(key, prior, mass, last_arrival, num_atoms, log_no_later_use):
    """A draw of the mass from its conditional (:func:`mass_conditional`) under ``prior``.

    ``Gamma(a, b)``: the conjugate ``Gamma(a + K, b + S)``; any other prior on ``(0, ∞)``: one
    slice-sampling update (:func:`~numpyro_bnp.infer.core.mcmc.slice_sample`) of ``log α``, density
    ``p(α) α^{K+1} e^{-α S}`` (with the Jacobian ``α``). Arguments as in
    :func:`mass_conditional`; returns the new mass, a scalar.
    """
    shape, rate = mass_conditional(mass, last_arrival, num_atoms, log_no_later_use)
    dtype = rate.dtype
    if type(prior) is dist.Gamma:
        a = jnp.asarray(prior.concentration, dtype) + shape
        return random.gamma(key, a, dtype=dtype) / (jnp.asarray(prior.rate, dtype) + rate)

    def log_density(u):
        return prior.log_prob(jnp.exp(u)) + (shape + 1.0) * u - jnp.exp(u) * rate

    return jnp.exp(slice_sample(key, jnp.log(mass), log_density, jnp.asarray(1.0, dtype)))
