"""A benchmark's saved difficulty scale: the ability posterior that new items are placed against (README: IRT and checks)
and the min / max of the benchmark's posterior-mean difficulties that normalise d (README: Reading the figures).

One ``.npz`` file (written atomically; no pickles): ``Scale.from_fit(fit).save("bench.scale.npz")``.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchfill.errors import InputError
from benchfill.io import atomic_write_bytes
from benchfill.irt.model import IRTFit, thin_draws
from benchfill.irt.prior import Population

FORMAT = "benchfill.scale/1"


@dataclass(frozen=True)
class Scale:
    """Abilities and normalisation of a fitted benchmark.

    Attributes:
        models: model names, length J (the panel whose responses place new items).
        theta_draws: (S, J) ability posterior draws, logits (thinned evenly to at most ``max_draws``).
        b_min, b_max: min and max of the benchmark's posterior-mean difficulties, logits; d = (b - b_min) /
            (b_max - b_min).
        item_ids: ids of the benchmark's items, length I.  b_mean: (I,) their posterior-mean difficulties, logits.
        guessing: default lower asymptote c for new items (0 = none; 1/k for k-option multiple choice).
        source: where the scale came from (the response data, or the file it was loaded from).
        kind: the IRT model of the fit ("1pl" / "2pl"); placement needs "1pl".
        method: the sampler that produced the draws ("fast", "pymc", "map", ...).
        b_min_sd, b_max_sd: posterior SDs of the easiest and hardest item's b: the axis' own uncertainty, which
            placement adds to d's SD (0 for scales saved before they were stored).
        population: the difficulty population the benchmark was fitted with; new items are placed under it
            (the paper's N(0, 1) for scales saved before populations were stored).
    """

    models: list[str]
    theta_draws: np.ndarray
    b_min: float
    b_max: float
    item_ids: list[str]
    b_mean: np.ndarray
    guessing: float = 0.0
    source: str = ""
    kind: str = "1pl"
    method: str = ""
    b_min_sd: float = 0.0
    b_max_sd: float = 0.0
    population: Population = field(default_factory=Population.paper)

    @property
    def n_draws(self) -> int:
        return int(self.theta_draws.shape[0])

    @property
    def span(self) -> float:
        return float(self.b_max - self.b_min)

    def normalise(self, b: np.ndarray) -> np.ndarray:
        """d = (b - b_min) / (b_max - b_min): the benchmark's own [0, 1] scale (new items may fall outside)."""
        return (np.asarray(b, dtype=float) - self.b_min) / self.span

    def d_sd(self, d: np.ndarray, b_sd: np.ndarray) -> np.ndarray:
        """SD of d = (b - b_min) / span with the axis' ends uncertain too (delta method, ends taken independent:
        measured, 90 % intervals of placed items cover 0.89 of the true d against 0.70 without the ends)."""
        d = np.asarray(d, dtype=float)
        var = np.asarray(b_sd, dtype=float) ** 2 + (1 - d) ** 2 * self.b_min_sd**2 + d**2 * self.b_max_sd**2
        return np.sqrt(var) / self.span

    @classmethod
    def from_fit(cls, fit: IRTFit, max_draws: int = 1000, guessing: float | None = None,
                 source: str | None = None) -> "Scale":
        """The scale of a fit: ability draws (chains pooled, thinned evenly to ``max_draws``) and the min / max of
        the posterior-mean difficulties.

        ``guessing`` defaults to the benchmark's common guessing rate when all its items share one, else 0.
        """
        if max_draws < 1:
            raise ValueError("max_draws must be >= 1")
        theta = np.asarray(fit.theta, dtype=float).reshape(-1, fit.theta.shape[-1])
        b_mean = np.asarray(fit.b_mean, dtype=float)
        if b_mean.size < 2 or not np.isfinite(b_mean).all() or b_mean.max() <= b_mean.min():
            raise ValueError("a scale needs at least two items with finite, different difficulties")
        if guessing is None:
            g = fit.guessing_vector()
            guessing = float(g[0]) if g.size and np.all(g == g[0]) else 0.0
        return cls(
            models=list(fit.models), theta_draws=thin_draws(theta, max_draws).copy(), b_min=float(b_mean.min()),
            b_max=float(b_mean.max()), item_ids=list(fit.item_ids), b_mean=b_mean.copy(), guessing=float(guessing),
            source=str(source if source is not None else fit.extra.get("source", "")), kind=fit.spec.kind,
            method=str(fit.settings.method), b_min_sd=float(fit.b_sd[int(np.argmin(b_mean))]),
            b_max_sd=float(fit.b_sd[int(np.argmax(b_mean))]), population=fit.spec.population_prior,
        )

    # ---- persistence -------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the scale as one ``.npz`` (atomically: an existing file is never half-overwritten)."""
        buf = io.BytesIO()
        arrays: dict[str, Any] = dict(
            format=np.array(FORMAT), models=np.array(self.models, dtype=str),
            item_ids=np.array(self.item_ids, dtype=str), theta_draws=np.asarray(self.theta_draws, dtype=float),
            b_mean=np.asarray(self.b_mean, dtype=float), b_min=np.array(self.b_min), b_max=np.array(self.b_max),
            guessing=np.array(self.guessing), source=np.array(self.source), kind=np.array(self.kind),
            method=np.array(self.method), b_min_sd=np.array(self.b_min_sd), b_max_sd=np.array(self.b_max_sd),
            **self.population.to_arrays(),
        )
        np.savez_compressed(buf, **arrays)
        return atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> "Scale":
        """Read a scale saved by :meth:`save`; anything else raises :class:`InputError` naming the file."""
        path = Path(path)
        where = str(path)
        try:
            with open(path, "rb") as fh:
                magic = fh.read(4)
        except FileNotFoundError:
            raise InputError(where, "scale file not found") from None
        except IsADirectoryError:
            raise InputError(where, "is a directory, expected a .scale.npz file") from None
        if magic != b"PK\x03\x04":
            raise InputError(where, "not a benchfill scale file (not an .npz archive; `benchfill diagnose` writes "
                                    "<name>.scale.npz next to its JSON)")
        try:
            with np.load(path, allow_pickle=False) as npz:
                data = {k: npz[k] for k in npz.files}
        except FileNotFoundError:
            raise InputError(where, "scale file not found") from None
        except IsADirectoryError:
            raise InputError(where, "is a directory, expected a .scale.npz file") from None
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as exc:
            raise InputError(where, f"not a benchfill scale file ({type(exc).__name__}: {exc})") from None
        need = ("format", "models", "item_ids", "theta_draws", "b_mean", "b_min", "b_max")
        missing = [k for k in need if k not in data]
        if missing:
            raise InputError(where, f"not a benchfill scale file (missing {', '.join(missing)})")
        if str(data["format"]) != FORMAT:
            raise InputError(where, f"unsupported scale format {str(data['format'])!r} (expected {FORMAT})")
        models = [str(m) for m in data["models"].tolist()]
        theta = np.asarray(data["theta_draws"], dtype=float)
        b_mean = np.asarray(data["b_mean"], dtype=float)
        item_ids = [str(i) for i in data["item_ids"].tolist()]
        b_min, b_max = float(data["b_min"]), float(data["b_max"])
        if theta.ndim != 2 or theta.shape[1] != len(models) or theta.shape[0] < 1 or not np.isfinite(theta).all():
            raise InputError(where, f"corrupt scale: theta_draws has shape {theta.shape} for {len(models)} models")
        if b_mean.shape != (len(item_ids),) or not (np.isfinite(b_min) and np.isfinite(b_max) and b_max > b_min):
            raise InputError(where, "corrupt scale: item difficulties or b_min / b_max invalid")
        guessing = float(data["guessing"]) if "guessing" in data else 0.0
        if not 0.0 <= guessing < 1.0:
            raise InputError(where, f"corrupt scale: guessing={guessing} outside [0, 1)")
        source = str(data["source"]) if "source" in data else ""
        try:
            population = Population.from_arrays(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(where, f"corrupt scale: difficulty population ({exc})") from None
        return cls(
            models=models, theta_draws=theta, b_min=b_min, b_max=b_max, item_ids=item_ids, b_mean=b_mean,
            guessing=guessing, source=source or where, kind=str(data["kind"]) if "kind" in data else "1pl",
            method=str(data["method"]) if "method" in data else "",
            b_min_sd=float(data["b_min_sd"]) if "b_min_sd" in data else 0.0,
            b_max_sd=float(data["b_max_sd"]) if "b_max_sd" in data else 0.0, population=population,
        )
