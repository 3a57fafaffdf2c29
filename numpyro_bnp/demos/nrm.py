"""Demo: NGGP clusters of a real corpus, in one streaming pass (ADF-NRM) and refined (EP-NRM)."""

import os

import numpy as np
from jax import random

from numpyro_bnp import datasets
from numpyro_bnp._report import Column, median_seconds, print_table

MISSING = (
    "skipped: this part clusters the Reuters corpus of the 'lda' package, which is not "
    'installed (pip install lda; it comes with pip install -e ".[examples]" on Python 3.11 '
    "and 3.12, the versions it has wheels for)"
)


def reuters(num_test, seed):
    """The ``lda`` package's Reuters corpus (395 documents, 4,258 words,
    :func:`numpyro_bnp.datasets.reuters`), shuffled and split: ``(train, test, vocab)``;
    ``ImportError`` when the package is missing."""
    docs, vocab = datasets.reuters()
    return (*datasets.shuffled_split(docs, num_test, seed=seed), vocab)


def one_cluster_log_predictive(train, test, concentration):
    """``(M,)`` held-out log predictive of each test document when the whole corpus is one
    cluster: the Dirichlet–multinomial of the prior ``Dirichlet(concentration)`` updated by
    every training document (:class:`numpyro_bnp.families.DirichletMultinomial`)."""
    import jax
    import jax.numpy as jnp
    import numpyro.distributions as dist

    from numpyro_bnp.families import DirichletMultinomial, sparse_counts

    vocab_size = train.shape[1]
    family = DirichletMultinomial.from_prior(
        dist.Dirichlet(jnp.full(vocab_size, concentration, jnp.float32))
    )

    @jax.jit
    def scores(train, test):
        params = family.absorb(family.prior, train, jnp.ones(train.ids.shape[0]))
        return jax.vmap(lambda x: family.log_predictive(params, x))(test)

    return np.asarray(scores(sparse_counts(train), sparse_counts(test)))


def run(
    out_dir,
    *,
    num_train=None,
    num_test=79,
    mass=1.0,
    sigma=0.5,
    tau=1.0,
    concentration=0.05,
    num_passes=2,
    new_cluster_threshold=0.5,
    max_clusters=256,
    seed=0,
):
    """Cluster the Reuters documents under an NGGP mixture of Dirichlet–multinomials
    (:func:`numpyro_bnp.models.nggp_multinomial_mixture`, ``docs/nrm.md``).

    The 395 documents are shuffled; ``num_test`` are held out and the first ``num_train``
    (default: all the others) are streamed once through ``ADFNRM``, then refined by ``EPNRM``
    with ``num_passes`` expectation-propagation passes. Prints the clusters, the held-out log
    predictive per document of both next to one cluster for the whole corpus (the paired
    standard errors of the differences) and the largest clusters' most probable words. Saves
    the cluster sizes by rank, ``E[K_n]`` along the stream and EP's leave-one-out score per
    pass, and returns the figure's path in a list (an empty list, after saying so, when the
    ``lda`` package that ships the corpus is not installed). ``mass``, ``sigma``, ``tau`` are
    the NGGP's (``sigma=0.5``: the normalized inverse-Gaussian; 0: the Dirichlet process),
    ``concentration`` the Dirichlet prior's ``λ0`` of each cluster's word probabilities,
    ``new_cluster_threshold`` and ``max_clusters`` the engines' options.
    """
    from numpyro_bnp import models
    from numpyro_bnp.infer import ADFNRM, EPNRM
    from numpyro_bnp.plots import _pyplot, plot_cluster_sizes

    try:
        train, test, vocab = reuters(num_test, seed)
    except ImportError:
        print(MISSING)
        return []
    if num_train is not None:
        train = train[:num_train]
    kwargs = dict(
        vocab_size=train.shape[1], mass=mass, sigma=sigma, tau=tau, concentration=concentration
    )
    options = dict(new_cluster_threshold=new_cluster_threshold, max_clusters=max_clusters)
    model = models.nggp_multinomial_mixture

    adf_s, adf = median_seconds(
        lambda: ADFNRM(model, **options).run(None, train, progress_bar=False, **kwargs)
    )
    ep_s, ep = median_seconds(
        lambda: EPNRM(model, num_passes=num_passes, **options).run(
            random.PRNGKey(seed), train, progress_bar=False, **kwargs
        )
    )
    scores = {
        "one cluster": one_cluster_log_predictive(train, test, concentration),
        "ADF-NRM, one pass": np.asarray(adf.log_predictive(test)),
        f"EP-NRM, {len(ep.time) - 1} more passes": np.asarray(ep.log_predictive(test)),
    }
    results = {
        "ADF-NRM, one pass": (adf, adf_s),
        f"EP-NRM, {len(ep.time) - 1} more passes": (ep, ep_s),
    }

    def paired(a, b):
        gap = scores[a] - scores[b]
        return gap.mean(), gap.std(ddof=1) / np.sqrt(len(gap))

    base = "one cluster"
    print(
        f"Reuters, {len(train)} documents streamed, {len(test)} held out (vocabulary "
        f"{train.shape[1]:,}); NGGP(mass={mass}, sigma={sigma}, tau={tau}), "
        f"Dirichlet({concentration}) words per cluster"
    )
    rows = []
    for label, score in scores.items():
        if label == base:
            rows.append((label, 1, 1, score.mean(), "", ""))
            continue
        result, seconds = results[label]
        gap, se = paired(label, base)
        sizes = result.cluster_sizes
        rows.append(
            (
                label, len(sizes), int(np.sum(sizes >= 2)), score.mean(),
                f"{gap:>+9.1f} ± {se:4.1f}", seconds,
            )
        )  # fmt: skip
    print_table(
        (
            Column("", 22, align="<"), Column("clusters", 8), Column("of >= 2 docs", 12),
            Column("held-out", 9, ".1f"), Column("vs one cluster", 16), Column("s", 5, ".1f"),
        ),
        rows,
    )  # fmt: skip
    adf_label, ep_label = results
    gap, se = paired(ep_label, adf_label)
    loo = np.asarray(ep.traces["log_predictive"])
    print(
        "held-out: log predictive per document in nats, ± the paired standard error of the "
        f"difference; s: seconds, compilation included. EP's passes changed the held-out score "
        f"by {gap:+.2f} ± {se:.2f} and the training documents' leave-one-out score from "
        f"{loo[0]:.1f} (the ADF pass) to {loo[-1]:.1f}."
    )
    sizes = ep.cluster_sizes
    conc = np.asarray(ep.components.concentration)
    print("EP's largest clusters and their most probable words:")
    for k in np.argsort(sizes)[::-1][:5]:
        words = ", ".join(vocab[np.argsort(conc[k])[::-1][:6]])
        print(f"  {sizes[k]:5.1f} documents: {words}")

    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(11.0, 3.0), layout="constrained")
    plot_cluster_sizes({adf_label: adf}, axes=axes[:2])
    ranked = np.sort(sizes)[::-1]
    axes[0].loglog(np.arange(1, len(ranked) + 1), ranked, ".-", label=ep_label)
    axes[0].legend(fontsize=8)
    axes[0].set_title("cluster sizes", fontsize=9)
    axes[1].set_title("ADF: clusters along the stream", fontsize=9)
    axes[2].set_title("EP: leave-one-out score per pass", fontsize=9)
    axes[2].plot(ep.time, ep.traces["log_predictive"], "o-")
    axes[2].set_xlabel("EP pass (0: the ADF pass)")
    axes[2].set_ylabel("log predictive per document")
    axes[2].set_xticks(ep.time)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "nrm_reuters_clusters.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]
