"""``sweep``: Monte Carlo ensembles of [`run_simulate`][stochformer.experiments.simulate.run_simulate] over a
grid and/or a list of points in configuration space, run as independent tasks.

Each grid point's ``samples`` are split into tasks of ``samples_per_task`` samples; task ``j`` of
point ``i`` runs with seed ``child_seeds(child_seeds(seed, P)[i], C)[j]`` (numpy SeedSequence
spawning, which depends only on the indices), so the numbers do not depend on how many workers run
the tasks, or in which order. The merged result is one ``xarray.Dataset`` with dims
``([point,] *grid axes, sample, time)``, the time t = ℓ T/L in the units of T.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Optional

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from ..config import (MAX_GRID_POINTS, TOKENS_PER_POINT, ConfigError, ExperimentConfig, InitConfig, RunConfig, as_config,
                      build_config, validate)
from ..io.store import ResultStore, to_jsonable
from ..io.names import NAMES, axis_description
from ..io.results import Result
from ..core.runtime import child_seeds, provenance
from ..measure.stats import mean_and_se
from ..tasks import Task, run_tasks
from ..core.validation import validated
from ..config.build import GivenModels, task_model
from ..integrate import ModelSource
from .simulate import run_simulate
from .preflight import Estimate, simulate_estimate

if TYPE_CHECKING:  # imported where the dataset is built
    import xarray

STATISTICS = ("mean_cosine", "energy", "min_cosine")
#: largest number of grid points and of tasks a sweep plans (planning validates each point)
MAX_POINTS, MAX_TASKS = MAX_GRID_POINTS, 1_000_000
# model fields that a sweep sets itself and that cannot be axes
NOT_AXES = ("batch", "seed")


def _field_names() -> set[str]:
    names = set(RunConfig.model_fields) - set(NOT_AXES)
    return names | {f"init.{k}" for k in InitConfig.model_fields}  # RunConfig.init's model


def _check_names(names: list[str], where: str) -> None:
    valid = _field_names()
    for name in names:
        if name in NOT_AXES:
            hint = "use `samples` and `samples_per_task`" if name == "batch" else "a sweep sets it per task"
            raise ValueError(f"{where}: {name!r} cannot be swept ({hint})")
        if name not in valid:
            raise ValueError(f"{where}: unknown field {name!r}; valid fields are {', '.join(sorted(valid))}")


def _same_value(value: Any) -> Any:
    """``value`` with equal numbers written alike (``1.0`` as ``1``, ``-0.0`` as ``0``), also inside
    lists and tables, so that values a config reads as equal are found repeated."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_same_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _same_value(v) for k, v in value.items()}
    return value


class SweepConfig(ExperimentConfig):
    """A sweep: ``model``, the base [`RunConfig`][stochformer.config.RunConfig] (every ``simulate`` field but ``batch``),
    the axes and the samples.

    ``grid``: ``{field: [values]}`` of model fields, the Cartesian product in the order written;
    ``points``: a list of ``{field: value}`` (fields not given keep the base value), crossed with
    the grid. Nested fields are dotted (``"init.cosine"``)."""

    command: ClassVar[str] = "sweep"
    #: the base model's token file is checked at every point (`plan_sweep`), whose N and d may differ
    validation_context: ClassVar[dict] = {TOKENS_PER_POINT: True}
    model_unused: ClassVar[dict] = {"batch": "a sweep sets the batch of each task from `samples_per_task`; set "
                                             "`samples` and `samples_per_task` instead"}

    samples: int = Field(64, ge=1, description="Monte Carlo samples per grid point (>= 1)")
    samples_per_task: int = Field(16, ge=1, description="samples per task (>= 1); the last task may have fewer")
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    points: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("grid", mode="before")
    @classmethod
    def _grid_shape(cls, grid: Any) -> Any:
        if not isinstance(grid, dict):
            raise ValueError(f"grid: expected a table of axes, e.g. [grid] gamma = [-1, 0, 1] (got {grid!r})")
        for name, values in grid.items():
            if not isinstance(values, list):
                raise ValueError(f"grid.{name}: expected a list of values, e.g. {name} = [{values!r}] (got {values!r})")
        return grid

    @field_validator("points", mode="before")
    @classmethod
    def _points_shape(cls, points: Any) -> Any:
        if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
            raise ValueError(f"points: expected a list of tables, e.g. [[points]] N = 8 (got {points!r})")
        return points

    @field_validator("grid")
    @classmethod
    def _grid(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        _check_names(list(grid), "grid")
        for name, values in grid.items():
            if not values:
                raise ValueError(f"grid.{name}: empty axis (give at least one value)")
            if len({json.dumps(_same_value(v), sort_keys=True) for v in values}) != len(values):
                raise ValueError(f"grid.{name}: repeated values {values}")
        return grid

    @field_validator("points")
    @classmethod
    def _points(cls, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, point in enumerate(points):
            if not point:
                raise ValueError(f"points[{i}]: empty point (give at least one field)")
            _check_names(list(point), f"points[{i}]")
        return points

    @model_validator(mode="after")
    def _sweep_checks(self) -> "SweepConfig":
        n_points = math.prod(len(v) for v in self.grid.values()) * max(1, len(self.points))
        if n_points > MAX_POINTS:
            raise ValueError(f"grid: {n_points} points; a sweep has at most {MAX_POINTS} (split it into several sweeps)")
        if n_points * math.ceil(self.samples / self.samples_per_task) > MAX_TASKS:
            raise ValueError(f"samples: {n_points} points x ceil(samples / samples_per_task) tasks exceed "
                             f"{MAX_TASKS}; raise samples_per_task or lower samples")
        overlap = sorted({k for p in self.points for k in p} & set(self.grid))
        if overlap:
            raise ValueError(f"grid and points both set {overlap}; give each field in one of them")
        return self

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): every point's
        simulate estimate at its task's batch, the largest task on each worker, and the merged dataset.

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        plan = plan_sweep(self)
        workers = max(1, min(workers, len(plan.configs) * len(plan.task_sizes)))  # no more at once than tasks
        per = [simulate_estimate(c, batch=plan.task_sizes[0]) for c in plan.configs]
        n_layers = max(c.L // c.record_every + 2 for c in plan.configs)
        dataset = 3 * 150.0 * len(plan.configs) * self.samples * n_layers
        task_mem = max(e.bytes for e in per)
        seconds = sum(e.seconds for e in per) * len(plan.task_sizes) / max(1, workers)
        if dataset > task_mem * workers:
            field = "samples, grid size or model.L"
        else:
            field = max(per, key=lambda e: e.bytes).memory_fields
            if workers > 1:  # the tasks held at once
                field = f"--workers ({workers} tasks at once, up to {task_mem / 2**30:.3g} GiB each) or {field}"
        return Estimate(task_mem * workers + dataset, seconds, field, "samples, grid size, model.L or model.N")

def load_sweep(path: Path | str, overrides: Optional[list[str]] = None) -> SweepConfig:
    """Read and validate a sweep file (TOML); ``overrides`` as ``--set FIELD=VALUE``.

    Parameters
    ----------
    path : str or pathlib.Path
        The TOML file.
    overrides : list of str, optional
        ``FIELD=VALUE`` strings.

    Returns
    -------
    SweepConfig
        The validated sweep.
    """
    return build_config(None, list(overrides or []), path, model=SweepConfig)


@dataclass
class SweepPlan:
    """The resolved sweep: ``configs[i]`` is flat point ``i`` (points outer, grid in C order),
    ``shape`` the point/grid shape, ``dims`` its dimension names.

    Attributes
    ----------
    config : SweepConfig
        The sweep.
    dims : list of str
        The dimension names.
    shape : tuple of int
        The point/grid shape.
    coords : dict
        Dimension → values.
    configs : list of RunConfig
        One per flat point.
    task_sizes : list of int
        Samples per task.
    """

    config: SweepConfig
    dims: list[str]
    shape: tuple[int, ...]
    coords: dict[str, Any]
    configs: list[RunConfig]
    task_sizes: list[int]

    def tasks(self, extra: Optional[dict] = None) -> list[Task]:
        """One task per (point, part of its samples), with its own seed (see the module docstring).

        Parameters
        ----------
        extra : dict, optional
            Further keywords of every task (``model``).

        Returns
        -------
        list of Task
            The tasks, each with its own seed.
        """
        point_seeds = child_seeds(self.config.model.seed, len(self.configs))
        out = []
        for i, (cfg, pseed) in enumerate(zip(self.configs, point_seeds)):
            resources = {"GPU": 1} if cfg.device.startswith("cuda") else None
            for j, (size, tseed) in enumerate(zip(self.task_sizes, child_seeds(pseed, len(self.task_sizes)))):
                run = cfg.model_copy(update={"batch": size, "seed": tseed})
                out.append(Task(f"point{i:05d}-part{j:05d}", simulate_task,
                                {"config": run.model_dump(mode="json"), **(extra or {})}, resources))
        return out


def _dotted_get(cfg: RunConfig, name: str) -> Any:
    value: Any = cfg
    for part in name.split("."):
        value = getattr(value, part)
    return value


def _coordinate(values: list[Any]) -> np.ndarray:
    arr = np.asarray(values)
    return arr if arr.dtype.kind in "biuf" else np.asarray([str(v) for v in values])


def _resolve(base: RunConfig, updates: dict[str, Any], where: str) -> RunConfig:
    try:
        return base.with_updates(**updates)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {str(exc).removeprefix('invalid configuration: ')}") from None


def plan_sweep(cfg: SweepConfig) -> SweepPlan:
    """Resolve and validate every point of the sweep (``ConfigError`` naming the axis and value).

    Parameters
    ----------
    cfg : SweepConfig
        The sweep.

    Returns
    -------
    SweepPlan
        Every point resolved.
    """
    base = cfg.model
    for name, values in cfg.grid.items():  # each value alone, for a message naming it
        for k, v in enumerate(values):
            _resolve(base, {name: v}, f"grid.{name}[{k}] = {v!r}")
    points = cfg.points or [{}]
    configs = []
    for point in points:
        for combo in itertools.product(*cfg.grid.values()):
            updates = {**point, **dict(zip(cfg.grid, combo))}
            where = ", ".join(f"{k} = {v!r}" for k, v in updates.items()) or "base"
            configs.append(_resolve(base, updates, f"sweep point ({where})"))
    dims = (["point"] if cfg.points else []) + list(cfg.grid)
    shape = ((len(cfg.points),) if cfg.points else ()) + tuple(len(v) for v in cfg.grid.values())
    coords: dict[str, Any] = {name: _coordinate(values) for name, values in cfg.grid.items()}
    if cfg.points:
        coords["point"] = np.arange(len(cfg.points))
        n_grid = math.prod(len(v) for v in cfg.grid.values())
        for name in sorted({k for p in cfg.points for k in p}):
            coords[name] = ("point", _coordinate([_dotted_get(configs[i * n_grid], name) for i in range(len(cfg.points))]))
    n, per = math.ceil(cfg.samples / cfg.samples_per_task), cfg.samples_per_task
    return SweepPlan(cfg, dims, shape, coords, configs, [min(per, cfg.samples - j * per) for j in range(n)])


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def simulate_task(config: dict, model: Optional[ModelSource] = None) -> dict:
    """One task: ``simulate`` with ``config`` (batch = the task's samples, seed = the task's seed)
    on one CPU thread (so the numbers do not depend on the worker's thread count; parallelism comes
    from the tasks). Returns ``{"times": [...], stat: (batch, n_times) lists, "elapsed_s", "device"}``.

    Parameters
    ----------
    config : dict
        The task's RunConfig fields.
    model : Model or callable, optional
        The model run, or a factory building it from the task's config.

    Returns
    -------
    dict
        Times, per-sample statistics, run time and device; with ``model``, ``model``: the record
        of the model that ran.
    """
    cfg = validate(RunConfig, config)
    stepped, record = task_model(model, cfg)
    with _torch_threads(1):
        res = run_simulate(cfg, model=stepped)
    ds = res.data
    return {
        "times": ds["time"].values.tolist(),
        **{name: ds[name].values.tolist() for name in STATISTICS},
        "elapsed_s": res.elapsed_s,
        "device": res.provenance["device"],
        **record,
    }


def merge_tasks(plan: SweepPlan, results: dict[str, dict]) -> xarray.Dataset:
    """The labelled dataset: per-sample statistics ``(*dims, sample, time)`` and their sample
    mean and SE ``(*dims, time)``, time t = ℓ T/L in the units of T (the union of the points'
    recorded times; those a point does not have, with a swept ``L``, ``T`` or ``record_every``, are NaN).

    Parameters
    ----------
    plan : SweepPlan
        The resolved sweep.
    results : dict
        Task key → its result.

    Returns
    -------
    xarray.Dataset
        The labelled dataset.
    """
    import xarray as xr

    tasks = plan.tasks()
    times = sorted({t for r in results.values() for t in r["times"]})
    col = {t: k for k, t in enumerate(times)}
    n_parts, samples, per = len(plan.task_sizes), plan.config.samples, plan.config.samples_per_task
    data = {name: np.full((len(plan.configs), samples, len(times)), np.nan) for name in STATISTICS}
    for n, task in enumerate(tasks):
        i, j = divmod(n, n_parts)
        r = results[task.key]
        rows = slice(j * per, j * per + plan.task_sizes[j])
        cols = [col[t] for t in r["times"]]
        for name in STATISTICS:
            data[name][i, rows][:, cols] = np.asarray(r[name], dtype=float)
    dims = [*plan.dims, "sample", "time"]
    variables = {}
    for name in STATISTICS:
        values = data[name].reshape(*plan.shape, samples, len(times))
        mean, se = mean_and_se(torch.from_numpy(values), axis=-2)
        variables[name] = (dims, values)
        variables[f"{name}_mean"] = (dims[:-2] + ["time"], mean.numpy())
        variables[f"{name}_se"] = (dims[:-2] + ["time"], se.numpy())
    coords = {**plan.coords, "sample": np.arange(samples), "time": np.asarray(times), "step": _step_coordinate(plan, times)}
    ds = xr.Dataset(variables, coords=coords)
    ds.attrs.update(
        {
            "command": "sweep",
            "sweep_config": json.dumps(plan.config.model_dump(mode="json")),
            "seed": plan.config.model.seed,
            "samples": samples,
            "samples_per_task": per,
        }
    )
    return ds


def _step_coordinate(plan: SweepPlan, times: list[float]) -> tuple[Any, np.ndarray]:
    """The step k = t/Δt of every time: one row ``("time", k)`` when every point has the same Δt = T/L,
    else ``((*dims, "time"), k)`` per point (float, NaN where a point has no step at that time)."""
    t = np.asarray(times, dtype=float)
    dts = np.asarray([c.dt for c in plan.configs])
    if np.all(dts == dts[0]):
        return ("time", np.rint(t / dts[0]).astype(np.int64))
    steps = np.rint(t[None, :] / dts[:, None])
    steps[np.abs(steps * dts[:, None] - t[None, :]) > 1e-9 * np.maximum(np.abs(t), 1.0)] = np.nan
    return ((*plan.dims, "time"), steps.reshape(*plan.shape, len(t)))


@dataclass(repr=False)
class SweepResult(Result):
    """What [`run_sweep`][stochformer.experiments.sweep.run_sweep] returns: config, merged dataset, provenance and bookkeeping.

    Attributes
    ----------
    config : SweepConfig
        The sweep.
    data : xarray.Dataset
        The merged dataset.
    provenance : dict
        Versions, platform and device.
    elapsed_s : float
        The run time in seconds.
    meta : dict
        Bookkeeping.
    """

    command: ClassVar[str] = "sweep"
    config: SweepConfig
    data: Any
    provenance: dict
    elapsed_s: float
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-able summary: axes, and per point the mean ± SE of each statistic at the last time.

        Returns
        -------
        dict
            JSON-able.
        """
        ds = self.data
        last = ds.isel(time=-1)
        final = {}
        for name in STATISTICS:
            final[name] = to_jsonable(last[f"{name}_mean"].values)
            final[f"{name}_se"] = to_jsonable(last[f"{name}_se"].values)
        return to_jsonable(
            {
                "dims": [d for d in ds[f"{STATISTICS[0]}_mean"].dims if d != "time"],
                "coords": {k: ds[k].values for k in ds.coords if k not in ("sample", "time", "step")},
                "samples": self.config.samples,
                "samples_per_task": self.config.samples_per_task,
                "final_time": float(ds["time"].values[-1]),
                "final": final,
                **self.meta,
            }
        )

    def names(self) -> dict[str, dict[str, str]]:
        """The swept fields' descriptions ([`axis_description`][stochformer.io.names.axis_description]).

        Returns
        -------
        dict of str to dict
            Variable name → ``{"long_name": ..., "units": ...}``.
        """
        return {str(k): axis_description(str(k), RunConfig) for k in self.data.coords if k not in NAMES}

    def _dataset(self) -> Any:
        return self.data


@validated
def run_sweep(
    cfg: SweepConfig,
    store: Optional[Path | str] = None,
    scheduler: Any = None,
    progress: bool = False,
    model: Optional[ModelSource] = None,
) -> SweepResult:
    """Plan the sweep, run its tasks and merge them into one dataset.

    Parameters
    ----------
    cfg : SweepConfig or dict
        The base model and the swept fields ([`SweepConfig`][stochformer.experiments.sweep.SweepConfig],
        or [`load_sweep`][stochformer.experiments.sweep.load_sweep] of a TOML file).
    store : str or pathlib.Path, optional
        A folder keeping each finished task as it finishes: a rerun resumes from it.
    scheduler : str or object, optional
        Where the tasks run ([`run_tasks`][stochformer.tasks.run_tasks]: serial, processes, Dask).
    progress : bool, optional
        Show a progress bar.
    model : Model or callable, optional
        A factory ``model(run_cfg) -> model`` called with each task's run config, whose model is
        simulated instead of the config's; or one model object, where the points share one model
        configuration (a sweep over N, T, L or init). Checked before any work, recorded in
        ``result.meta["model"]`` (``runs``: per point, keyed ``pointNNNNN``;
        [`GivenModels`][stochformer.config.build.GivenModels]); not with ``store``; with a process or
        Dask ``scheduler`` it must pickle.

    Returns
    -------
    SweepResult
        One dataset with a dimension per swept field
        ([`SweepResult`][stochformer.experiments.sweep.SweepResult]).

    Raises
    ------
    ConfigError
        A swept field that does not exist or a value out of its range, naming it.
    """
    cfg = as_config(cfg, SweepConfig)
    start = time.perf_counter()
    plan = plan_sweep(cfg)
    given = GivenModels.check(model, plan.configs, "sweep", scheduler, store, prefix="model.")
    tasks = plan.tasks(given.task_kwargs())
    cache = ResultStore(store) if store is not None else None
    stored = sum(cache.load(t.key, t.cache_key) is not None for t in tasks) if cache else 0
    results = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="sweep")
    for t in tasks:
        given.add(t.key.split("-")[0], results[t.key].pop("model", None))
    ds = merge_tasks(plan, results)
    devices = sorted({r["device"] for r in results.values()})
    meta = {
        "tasks": len(tasks),
        "tasks_already_stored": stored,
        "points": len(plan.configs),
        "tasks_per_point": len(plan.task_sizes),
        "scheduler": scheduler if isinstance(scheduler, str) or scheduler is None else type(scheduler).__name__,
        "task_devices": devices,
        "task_compute_s": sum(results[t.key]["elapsed_s"] for t in tasks),  # summed over tasks
        **given.meta(),
    }
    prov = {**provenance("cpu"), "device": ", ".join(devices)}  # where the tasks ran, not the client
    return SweepResult(cfg, ds, prov, time.perf_counter() - start, meta)
