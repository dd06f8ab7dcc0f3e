"""``phase``: a phase diagram of synchronisation over two config fields (SPEC §6 item 6).

Every grid point (x, y) is an independent task run through [`stochformer.tasks.run_tasks`][stochformer.tasks.run_tasks]
(stored as it finishes, so a killed sweep resumes; ``scheduler=`` spreads it over processes or
Dask). What is measured at a point (``measure``):

* ``lyapunov``: the pair exponent λ̂₁ (Benettin, [`stochformer.experiments.sync.measure_lyapunov`][stochformer.experiments.sync.measure_lyapunov])
  with its SE; it is predicted to be λ₁ − γ, negative where pairs synchronise almost surely;
* ``sync_fraction``: the fraction of ``batch`` runs from uniform tokens whose minimum pairwise
  cosine is ≥ 1 − ``sync_tol`` at T (with ``up_to_sign``: |cosine|, for odd fields).

The predicted boundaries λ₁ − γ = 0 and λ̄ − 2γ = 0 are evaluated on a fine grid of the two
fields. The pseudo-field ``sigma`` sets σ_U = σ_W = σ.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import numpy as np
import torch
import xarray as xr
from pydantic import Field, model_validator

from ..config.build import GivenModels, initial_tokens, make_model, setup, task_model
from ..config import ConfigError, ExperimentConfig, MEASURED_HORIZON, RunConfig, as_config, check_grid_size
from ..io.names import NAMES, axis_description, description
from ..io.results import Result
from ..integrate import ModelSource, SaveAt, solve
from ..core.sphere import gram
from ..measure.stats import mean_and_se
from ..tasks import Task, run_tasks
from ..core.validation import blamed_on, experiment_fields, validated
from .sync import StepNotSmall, check_extrapolation, check_small_steps, measure_lyapunov, pair_config, predicted_rates
from .preflight import BOUNDARY_POINT_S, Estimate, simulate_estimate

#: Fields that take the grid values; ``sigma`` sets both bias scales.
PSEUDO_FIELDS = {"sigma": ("sigma_U", "sigma_W")}
_NUMERIC = {name for name, f in RunConfig.model_fields.items() if f.annotation in (int, float)} | {"gamma"}


class PhaseConfig(ExperimentConfig):
    """``model``: the base [`RunConfig`][stochformer.config.RunConfig]; the grid ``x_field`` × ``y_field`` (numeric model
    fields or ``sigma``) and what is measured at each point."""

    command: ClassVar[str] = "phase"
    model_min: ClassVar[dict] = {"T": MEASURED_HORIZON}

    x_field: str = "gamma"
    x_values: list[float] = Field(default_factory=lambda: [-1.0, -0.5, 0.0, 0.5])
    y_field: str = "sigma"
    y_values: list[float] = Field(default_factory=lambda: [0.0, 0.5, 1.0])
    measure: Literal["lyapunov", "sync_fraction"] = "lyapunov"
    pairs: int = Field(64, ge=2, description="pairs per grid point for measure = 'lyapunov' (>= 2)")
    eps: float = Field(1e-4, ge=1e-12, le=1e-2, description="pair separation, in [1e-12, 0.01] (a smaller one is lost to "
                       "float64's resolution of unit vectors, 2.2e-16)")
    sync_tol: float = Field(1e-2, gt=0.0, lt=1.0, description="synchronised: min cosine >= 1 - sync_tol, in (0, 1)")
    up_to_sign: bool = Field(False, description="sync_fraction on |cosine| (odd fields synchronise up to sign)")
    boundary_points: int = Field(61, ge=5, le=1001, description="fine grid per axis for the predicted boundary")
    extrapolate: bool = Field(True, description="lyapunov: λ̂₁ extrapolated to Δt → 0 from L, L/2, L/4 steps "
                              "(L a multiple of 4)")

    @model_validator(mode="after")
    def _grid(self) -> "PhaseConfig":
        for axis in ("x", "y"):
            name, values = getattr(self, f"{axis}_field"), getattr(self, f"{axis}_values")
            if name not in _NUMERIC and name not in PSEUDO_FIELDS:
                valid = ", ".join(sorted(_NUMERIC | set(PSEUDO_FIELDS)))
                raise ValueError(f"{axis}_field: {name!r} is not a numeric model field; valid: {valid}")
            if not values:
                raise ValueError(f"{axis}_values: must list at least one value")
        if self.x_field == self.y_field:
            raise ValueError("y_field: must differ from x_field")
        check_grid_size(len(self.x_values) * len(self.y_values), "x_values, y_values")
        depths = self.x_values if self.x_field == "L" else self.y_values if self.y_field == "L" else [self.model.L]
        extrapolate = self.extrapolate and self.measure == "lyapunov"
        for L in depths:
            check_extrapolation(int(L), extrapolate)
        swept = {self.x_field: "x_values", self.y_field: "y_values"}
        points = ((f"at {self.x_field} = {x:g}, {self.y_field} = {y:g}, ", self.model.model_copy(update=self._updates(x, y)))
                  for x in self.x_values for y in self.y_values)  # unvalidated: validating 300 × 300 points took 36 s
        try:
            check_small_steps(points, extrapolate, swept.get("L", "model.L"), swept.get("T", "model.T"))
        except StepNotSmall:
            raise
        except (ValueError, ArithmeticError):  # a point that is no valid config is named by its own error
            for x in self.x_values:
                for y in self.y_values:
                    self.point(x, y)
            raise
        return self

    def _updates(self, x: float, y: float) -> dict[str, Any]:
        """The model fields that grid point (x, y) sets (``sigma`` sets two; an integer field an int)."""
        updates = {}
        for name, value in ((self.x_field, x), (self.y_field, y)):
            for field in PSEUDO_FIELDS.get(name, (name,)):
                is_int = RunConfig.model_fields[field].annotation is int
                updates[field] = int(value) if is_int and float(value).is_integer() else value
        return updates

    def point(self, x: float, y: float) -> RunConfig:
        """The validated [`RunConfig`][stochformer.config.RunConfig] at grid point (x, y) (raises ConfigError naming the field).

        Parameters
        ----------
        x, y : float
            The values of the two swept fields.

        Returns
        -------
        RunConfig
            The configuration at that point.
        """
        return self.model.with_updates(**self._updates(x, y))

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): every grid
        point's simulate estimate (pairs for the exponent, L, L/2, L/4 steps when extrapolated).

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        batch = 2 * self.pairs if self.measure == "lyapunov" else self.model.batch
        steps = 1.75 if self.measure == "lyapunov" and self.extrapolate else 1.0  # L, L/2, L/4
        per = [simulate_estimate(self.point(x, y), batch=batch) for x in self.x_values for y in self.y_values]
        top = max(per, key=lambda e: e.bytes)
        axes = f"{self.x_field}, {self.y_field}"
        field = f"{experiment_fields(top.memory_fields, 'pairs' if self.measure == 'lyapunov' else 'model.batch')} (or the "
        field += f"grid values of {axes})"
        boundary = BOUNDARY_POINT_S * self.boundary_points**2  # the predicted boundary on its fine grid
        return Estimate(top.bytes * workers, steps * sum(e.seconds for e in per) / max(1, workers) + boundary, field,
                        f"model.L, pairs, model.batch, boundary_points or the grid ({axes})")


def phase_point(config: dict, measure: str, pairs: int, eps: float, sync_tol: float, up_to_sign: bool, seed: int,
                extrapolate: bool = False, model: Optional[ModelSource] = None) -> dict:
    """One grid point (a task: module-level, JSON-able in and out but for ``model``); ``err``: the
    Δt → 0 extrapolation error of λ̂₁ (0 when not extrapolated).

    Parameters
    ----------
    config : dict
        The point's RunConfig fields.
    measure : {"lyapunov", "sync_fraction"}
        What is measured.
    pairs : int
        Pairs of the Lyapunov estimate.
    eps : float
        Their renormalised separation.
    sync_tol : float
        Tolerance of the synchronisation test.
    up_to_sign : bool
        Count antipodal tokens as synchronised.
    seed : int
        The point's seed.
    extrapolate : bool, optional
        Extrapolate Δt → 0.
    model : Model or callable, optional
        The point's model, or a factory building it from the point's run config
        ([`point_config`][stochformer.experiments.phase.point_config]).

    Returns
    -------
    dict
        ``value``, ``se``, ``err`` and the predicted λ₁, λ̄ there (JSON-able); with ``model``, ``model``:
        the record of the model that ran.
    """
    cfg = RunConfig.model_validate(config)
    env = setup(cfg)
    pred = predicted_rates(cfg, with_bound=False)
    out: dict[str, Any] = {"lambda_1_pred": pred["lambda_1_pred"], "lambda_bar_pred": pred["lambda_bar_pred"]}
    stepped, record = task_model(model, point_config(cfg, measure), env)
    out.update(record)
    if measure == "lyapunov":
        lyap = measure_lyapunov(cfg, pairs, eps, seed, extrapolate=extrapolate, env=env, model=stepped)
        out.update(value=lyap["lambda_1"], se=lyap["lambda_1_se"], err=lyap.get("lambda_1_extrap_err", 0.0),
                   at_L=lyap.get("lambda_1_steps", {}).get(str(cfg.L), lyap["lambda_1"]))
        return out
    gen = env.generator(seed)
    X0 = initial_tokens(cfg.init, cfg.batch, cfg.N, cfg.d, gen, env.dtype, env.device)
    with blamed_on(cfg):
        ds = solve(make_model(cfg, env.dtype, env.device) if stepped is None else stepped, X0, cfg.T, cfg.L,
                   SaveAt(stats=()), generator=gen)
    G = gram(torch.from_numpy(ds["X_final"].values).to(env.dtype))
    G = G.abs() if up_to_sign else G
    iu = torch.triu_indices(cfg.N, cfg.N, offset=1, device=G.device)
    synced = (G[:, iu[0], iu[1]].min(dim=-1).values >= 1.0 - sync_tol).double()
    frac, se = mean_and_se(synced)
    out.update(value=float(frac), se=float(se), err=0.0, at_L=float(frac))
    return out


def point_config(cfg: RunConfig, measure: str) -> RunConfig:
    """The config a grid point runs for ``measure``: the pairs' config
    ([`pair_config`][stochformer.experiments.sync.pair_config]) for ``lyapunov``, the point's own for
    ``sync_fraction`` (the config a factory given as ``model=`` is called with).

    Parameters
    ----------
    cfg : RunConfig
        The point's config.
    measure : {"lyapunov", "sync_fraction"}
        What is measured.

    Returns
    -------
    RunConfig
        The config run.
    """
    return pair_config(cfg) if measure == "lyapunov" else cfg


@dataclass(repr=False)
class PhaseResult(Result):
    """``value``/``se``/``err``: (ny, nx) measured grid, its SE and Δt → 0 extrapolation error;
    ``pred_*``: the predictions at the grid points;
    ``fine_x``, ``fine_y``, ``fine_lambda_1``, ``fine_lambda_bar``: predictions on the fine grid;
    ``value_at_L``: the measured value at the model's own L steps (before the Δt → 0 extrapolation:
    the finite-depth value; None for results stored without it).

    Attributes
    ----------
    config : PhaseConfig
        The configuration run.
    x, y : numpy.ndarray
        The grid's axes.
    value, se, err : numpy.ndarray, shape (ny, nx)
        Measured value, SE and extrapolation error.
    pred_lambda_1, pred_lambda_bar : numpy.ndarray, shape (ny, nx)
        Predictions at the grid points.
    meta : dict
        Further record entries (``model``: a model given by hand).
    """

    command: ClassVar[str] = "phase"
    summary_name: ClassVar[str] = "phase.json"
    config: PhaseConfig
    x: np.ndarray
    y: np.ndarray
    value: np.ndarray
    se: np.ndarray
    err: np.ndarray
    pred_lambda_1: np.ndarray
    pred_lambda_bar: np.ndarray
    fine_x: np.ndarray
    fine_y: np.ndarray
    fine_lambda_1: np.ndarray
    fine_lambda_bar: np.ndarray
    provenance: dict
    elapsed_s: float
    value_at_L: Optional[np.ndarray] = None
    meta: dict = dataclass_field(default_factory=dict)

    def agreement(self) -> dict:
        """For ``lyapunov``: grid points where sign(measured) = sign(predicted λ₁ − γ), and those whose
        |measured − predicted| ≤ 3 √(SE² + err²); for ``sync_fraction``: points with fraction ≥ ½ exactly where λ₁ − γ < 0.

        Returns
        -------
        dict
            Counts of agreeing points and the grid's size.
        """
        pred = self.pred_lambda_1
        if self.config.measure == "lyapunov":
            same = np.sign(self.value) == np.sign(pred)
            within = np.abs(self.value - pred) <= 3 * np.hypot(self.se, self.err)
            return {"points": int(pred.size), "same_sign": int(same.sum()), "within_3se": int(within.sum())}
        same = (self.value >= 0.5) == (pred < 0)
        return {"points": int(pred.size), "same_side": int(same.sum())}

    def to_dict(self) -> dict:
        c = self.config
        return {
            "x_field": c.x_field, "y_field": c.y_field, "measure": c.measure, "x": self.x, "y": self.y,
            "value": self.value, "se": self.se, "err": self.err, "lambda_1_pred": self.pred_lambda_1,
            "lambda_bar_pred": self.pred_lambda_bar, "agreement": self.agreement(),
            **({} if self.value_at_L is None else {"value_at_L": self.value_at_L}),
        }

    @property
    def quantity(self) -> str:
        """The measured quantity's name in the dataset: ``lambda_1`` (measure = lyapunov) or ``sync_fraction``."""
        return "lambda_1" if self.config.measure == "lyapunov" else "sync_fraction"

    def names(self) -> dict[str, dict[str, str]]:
        """The fine grid's axes and predictions, and the measured value at L steps.

        Returns
        -------
        dict of str to dict
            Variable name → ``{"long_name": ..., "units": ...}``.
        """
        c, q = self.config, self.quantity
        out = {f"fine_{f}": {"long_name": f"{axis_description(f, RunConfig)['long_name']} (fine grid of the predictions)",
                             "units": axis_description(f, RunConfig)["units"]} for f in (c.x_field, c.y_field)}
        out.update({f: axis_description(f, RunConfig) for f in (c.x_field, c.y_field)})
        out["fine_lambda_1"] = {**NAMES["lambda_1_pred"], "long_name": NAMES["lambda_1_pred"]["long_name"] + " (fine grid)"}
        out["fine_lambda_bar"] = {**NAMES["lambda_bar_pred"], "long_name": NAMES["lambda_bar_pred"]["long_name"] + " (fine grid)"}
        base = description(q) or {}
        out[f"{q}_at_L"] = {"long_name": f"{base['long_name']} at the model's L steps (before Δt → 0)", "units": base["units"]}
        return out

    def _dataset(self) -> xr.Dataset:
        """The measured grid ``<q>``, ``<q>_se``, ``<q>_extrap_err`` (and ``<q>_at_L``), q = [`quantity`][stochformer.experiments.phase.PhaseResult.quantity],
        and the predictions ``lambda_1_pred``, ``lambda_bar_pred``: (y_field, x_field); the fine
        grid's ``fine_lambda_1``, ``fine_lambda_bar``: (fine_<y_field>, fine_<x_field>)."""
        c, q = self.config, self.quantity
        grid, fine = (c.y_field, c.x_field), ("fine_" + c.y_field, "fine_" + c.x_field)
        data = {q: (grid, self.value), f"{q}_se": (grid, self.se), f"{q}_extrap_err": (grid, self.err),
                "lambda_1_pred": (grid, self.pred_lambda_1), "lambda_bar_pred": (grid, self.pred_lambda_bar),
                "fine_lambda_1": (fine, self.fine_lambda_1), "fine_lambda_bar": (fine, self.fine_lambda_bar)}
        if self.value_at_L is not None:
            data[f"{q}_at_L"] = (grid, self.value_at_L)
        return xr.Dataset(
            data,
            coords={grid[1]: self.x, grid[0]: self.y, fine[1]: self.fine_x, fine[0]: self.fine_y},
            attrs={"measure": c.measure, "x_field": c.x_field, "y_field": c.y_field},
        )


def _fine_axis(cfg: PhaseConfig, field: str, values: list[float]) -> np.ndarray:
    lo, hi = min(values), max(values)
    if field in RunConfig.model_fields and RunConfig.model_fields[field].annotation is int:
        return np.arange(int(lo), int(hi) + 1, dtype=float)
    return np.linspace(lo, hi, cfg.boundary_points) if hi > lo else np.asarray([lo], float)


def _predictions(cfg: PhaseConfig, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lam1 = np.empty((len(ys), len(xs)))
    lbar = np.empty_like(lam1)
    for i, y in enumerate(ys):
        for j, x in enumerate(xs):
            p = predicted_rates(cfg.point(x, y), with_bound=False)
            lam1[i, j], lbar[i, j] = p["lambda_1_pred"], p["lambda_bar_pred"]
    return lam1, lbar


@validated
def run_phase(cfg: PhaseConfig, progress: bool = False, store: Optional[Path | str] = None, scheduler: Optional[str] = None,
              model: Optional[ModelSource] = None) -> PhaseResult:
    r"""The phase diagram: measure every grid point and the predicted boundaries.

    At each point of ``x_values`` × ``y_values`` the pair exponent $\hat\lambda_1$ (``measure =
    "lyapunov"``) or the fraction of synchronised samples is measured, beside the predictions
    $\lambda_1 - \gamma$ and $\bar\lambda - 2\gamma$ (SPEC §5). All grid configs are validated before any
    work.

    Parameters
    ----------
    cfg : PhaseConfig or dict
        The grid and the base model ([`PhaseConfig`][stochformer.experiments.phase.PhaseConfig]).
    progress : bool, optional
        Show a progress bar.
    store : str or pathlib.Path, optional
        A folder keeping each finished point: a rerun resumes from it.
    scheduler : str, optional
        Where the points run (``run_tasks``: serial, processes, Dask).
    model : Model or callable, optional
        A factory ``model(run_cfg) -> model`` called with each point's run config
        ([`point_config`][stochformer.experiments.phase.point_config]), whose model is measured
        instead of the config's; or one model object, where the points share one model
        configuration (a grid over N, T or L). Checked before any work, recorded in
        ``result.meta["model"]`` ([`GivenModels`][stochformer.config.build.GivenModels]); not with
        ``store``; with a process or Dask ``scheduler`` it must pickle.

    Returns
    -------
    PhaseResult
        ``value``, ``se``, ``err`` (ny, nx), the predictions at the points and on a fine grid
        ([`PhaseResult`][stochformer.experiments.phase.PhaseResult]).

    Raises
    ------
    ConfigError
        A grid field that is not numeric, an empty axis, or explicit V matrices (no predicted
        boundary), naming the field.
    TypeError
        A ``model`` (or what a factory builds) that is not the config's kind of model, naming ``model``.

    Examples
    --------
    >>> from stochformer.config import RunConfig
    >>> from stochformer.experiments.phase import PhaseConfig, run_phase
    >>> cfg = PhaseConfig(model=RunConfig(N=4, d=3, L=8, m=16, batch=2, seed=0),
    ...                   x_values=[-1.0, 1.0], y_values=[0.5], pairs=4, extrapolate=False)
    >>> run_phase(cfg).value.shape                  # (len(y_values), len(x_values))
    (1, 2)
    """
    cfg = as_config(cfg, PhaseConfig)
    start = time.perf_counter()
    xs, ys = np.asarray(cfg.x_values, float), np.asarray(cfg.y_values, float)
    points = {(i, j): cfg.point(x, y) for i, y in enumerate(ys) for j, x in enumerate(xs)}
    for p in points.values():
        if p.attention and p.V is not None:
            raise ConfigError("V: the phase diagram predicts λ₁ − γ for V = γI; explicit V matrices have no boundary")
    given = GivenModels.check(model, [point_config(p, cfg.measure) for p in points.values()], "phase", scheduler, store,
                              prefix="model.")
    env = setup(cfg)
    seeds = env.seeds(len(points))
    tasks = [
        Task(f"phase-{i}-{j}", phase_point, dict(config=p.model_dump(mode="json"), measure=cfg.measure, pairs=cfg.pairs,
                                                 eps=cfg.eps, sync_tol=cfg.sync_tol, up_to_sign=cfg.up_to_sign, seed=s,
                                                 extrapolate=cfg.extrapolate and cfg.measure == "lyapunov",
                                                 **given.task_kwargs()))
        for ((i, j), p), s in zip(points.items(), seeds)
    ]
    results = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="phase")
    value, se, err, at_L = (np.empty((len(ys), len(xs))) for _ in range(4))
    lam1, lbar = np.empty_like(value), np.empty_like(value)
    for (i, j) in points:
        r = results[f"phase-{i}-{j}"]
        given.add(f"phase-{i}-{j}", r.get("model"))
        value[i, j], se[i, j], err[i, j] = r["value"], r["se"], r["err"]
        at_L[i, j] = r.get("at_L", r["value"])
        lam1[i, j], lbar[i, j] = r["lambda_1_pred"], r["lambda_bar_pred"]
    fx, fy = _fine_axis(cfg, cfg.x_field, cfg.x_values), _fine_axis(cfg, cfg.y_field, cfg.y_values)
    f1, fb = _predictions(cfg, fx, fy)
    return PhaseResult(cfg, xs, ys, value, se, err, lam1, lbar, fx, fy, f1, fb, env.provenance(),
                       time.perf_counter() - start, at_L, given.meta())
