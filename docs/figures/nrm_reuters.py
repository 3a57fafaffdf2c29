"""Figure: cluster sizes of ADF-NRM under the Dirichlet process and the normalized
inverse-Gaussian prior on the Reuters corpus shipped by the ``lda`` package (395 documents,
vocabulary 4,258). Writes ``docs/figures/nrm_reuters.png``. Run from the project root:
``python docs/figures/nrm_reuters.py`` (needs ``pip install lda matplotlib``).
"""

import pathlib

import lda.datasets
import matplotlib

matplotlib.use("Agg")

from numpyro_bnp import models
from numpyro_bnp.infer import ADFNRM
from numpyro_bnp.plots import plot_cluster_sizes


def main():
    docs = lda.datasets.load_reuters()
    kwargs = dict(vocab_size=docs.shape[1], concentration=0.05, mass=1.0, tau=1.0)
    results = {}
    for label, sigma in (("DP (σ = 0)", 0.0), ("normalized IG (σ = ½)", 0.5)):
        engine = ADFNRM(models.nggp_multinomial_mixture, new_cluster_threshold=0.5)
        results[label] = engine.run(None, docs, sigma=sigma, progress_bar=False, **kwargs)
        sizes = results[label].cluster_sizes
        print(f"{label}: {len(sizes)} clusters, largest {sizes.max():.1f}")
    fig = plot_cluster_sizes(results)
    fig.suptitle("ADF-NRM on Reuters (395 documents)", fontsize=10)
    out = pathlib.Path(__file__).with_name("nrm_reuters.png")
    fig.savefig(out, dpi=120)
    print("wrote", out)


if __name__ == "__main__":
    main()
