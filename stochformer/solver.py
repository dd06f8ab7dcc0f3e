"""One entry point for every dynamics: :func:`solve` steps a model from tokens in memory and
returns a labelled :class:`xarray.Dataset`.

The model is anything with ``step(X, dt, draws) -> X'`` and ``reset(batch, d, generator, dtype,
device)``: the discrete :class:`~stochformer.model.Transformer` (SPEC §1), the
:class:`~stochformer.model.LimitSDE` (SPEC §3) and, with a random-feature field and chunked
attention, the mean-field particle system (SPEC §4). The randomness of step k is a
:class:`~stochformer.brownian.Draws`: the run's generator, and the Brownian normals of that step
from ``path`` when one is given (a coupling), else from the generator.

What is kept is a value, :class:`SaveAt`; the dataset has dims ``sample``, ``time`` (statistics),
``snapshot`` (token states), ``token`` and ``dim``; the ``time`` coordinate is t = k T/steps (in
the units of T) with the step index ``step`` beside it. Its attributes record T, the steps, the
seed, the model (every part, custom ones marked), the path, versions and device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np
import torch
import xarray as xr
from tqdm.auto import tqdm

from .brownian import BrownianPath, Draws
from .diagnostics import STATISTICS, pair_statistics
from .model.activations import ACTIVATIONS
from .runtime import make_generator, provenance
from .sphere import normalize
from .validation import check_finite


class Model(Protocol):
    """What :func:`solve` steps: X (batch, N, d), unit rows → X' one step ``dt`` later."""

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None: ...

    def step(self, X: torch.Tensor, dt: float, rng: Draws) -> torch.Tensor: ...

    # optional: ``schedule(X0, steps)``, a context manager within which the steps of a run
    # without a Brownian path are taken (how it uses the CPU cores; it must not change the numbers)


#: ``hook(k, X)`` after step k (1..steps): returns the state to continue from (or None: X itself)
Hook = Callable[[int, torch.Tensor], Optional[torch.Tensor]]


@dataclass(frozen=True)
class SaveAt:
    """What :func:`solve` keeps.

    ``stats``: per-sample statistics (names of :data:`~stochformer.diagnostics.STATISTICS`, computed in
    float64 whatever the state's dtype) every
    ``every`` steps, or at the steps ``at`` (0 and the last step are always included with
    ``every``); ``tokens_every`` / ``tokens_at``: the token states on the same rule (None: none);
    ``final``: the final state ``X_final``; ``energy_beta``: β of E_β; ``block``: Gram entries
    formed at once by the statistics (None: all; memory-linear for many tokens)."""

    every: int = 1
    at: Optional[Sequence[int]] = None
    stats: Sequence[str] = STATISTICS
    tokens_every: Optional[int] = None
    tokens_at: Optional[Sequence[int]] = None
    final: bool = True
    energy_beta: float = 1.0
    block: Optional[int] = None

    def __post_init__(self) -> None:
        if self.every < 1 or (self.tokens_every is not None and self.tokens_every < 1):
            raise ValueError("SaveAt: every and tokens_every must be >= 1")
        bad = sorted(set(self.stats) - set(STATISTICS))
        if bad:
            raise ValueError(f"SaveAt.stats: unknown statistics {bad}; valid: {', '.join(STATISTICS)}")

    def stat_steps(self, steps: int) -> list[int]:
        return _schedule(self.every, self.at, steps) if self.stats else []

    def token_steps(self, steps: int) -> list[int]:
        if self.tokens_every is None and self.tokens_at is None:
            return []
        return _schedule(self.tokens_every or steps, self.tokens_at, steps)


def _schedule(every: int, at: Optional[Sequence[int]], steps: int) -> list[int]:
    if at is not None:
        out = sorted({int(k) for k in at})
        if out and not (0 <= out[0] and out[-1] <= steps):
            raise ValueError(f"SaveAt: steps to save must lie in 0..{steps} (got {out[0]}..{out[-1]})")
        return out
    return sorted(set(range(0, steps + 1, every)) | {steps})


def solve(
    model: Model,
    X0: torch.Tensor,
    T: float,
    steps: int,
    save: SaveAt = SaveAt(),
    seed: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    path: Optional[BrownianPath] = None,
    hook: Optional[Hook] = None,
    progress: bool = False,
    desc: str = "steps",
    context: Any = None,
    what: str = "tokens",
) -> xr.Dataset:
    """Step ``model`` ``steps`` times with Δt = T/steps from X0: (batch, N, d), unit rows.

    ``seed`` or ``generator``: the run's random numbers (weights, features, and the Brownian
    normals unless ``path`` is given); ``path``: a :class:`~stochformer.brownian.BrownianPath` whose
    fine steps are a multiple of ``steps``, shared with other runs for a coupling; ``hook``: called
    after every step (e.g. the Lyapunov estimator's renormalisation). A non-finite state stops the
    run with :class:`~stochformer.validation.NonFiniteError` naming the step and the likely fields
    of ``context`` (the config, if any) and ``what`` is stepped. Returns the dataset of the module
    docstring; the noise source is reset first (per-run state drawn from the generator)."""
    if not (isinstance(T, (int, float)) and math.isfinite(T) and T > 0):
        raise ValueError(f"T: must be a finite number > 0 (got {T!r})")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: must be an integer >= 1 (got {steps!r})")
    if X0.dim() != 3:
        raise ValueError(f"X0: expected tokens of shape (batch, N, d), got {tuple(X0.shape)}")
    if generator is None:
        if seed is None:
            raise ValueError("seed: give a seed or a generator (every run is seeded)")
        generator = make_generator(seed, X0.device)
    B, N, d = X0.shape
    dt = T / steps
    model.reset(B, d, generator, X0.dtype, X0.device)
    stat_steps, token_steps = set(save.stat_steps(steps)), set(save.token_steps(steps))
    records: list[dict[str, torch.Tensor]] = []
    snapshots: list[torch.Tensor] = []

    def keep(k: int, X: torch.Tensor) -> None:
        if k in stat_steps:
            # in float64 whatever the state's dtype: the statistics of the tokens as they are, not
            # float32's rounding of 1 − cosine (a float32 token's norm is 1 only to ~1e-7)
            Xs = X if X.dtype == torch.float64 else normalize(X.to(torch.float64))
            stats = pair_statistics(Xs, save.energy_beta, save.block)
            records.append({name: stats[name].detach().cpu() for name in save.stats})
        if k in token_steps:
            snapshots.append(X.detach().cpu())

    X = check_finite(X0, 0, context, what)
    keep(0, X)
    # the model's use of the CPU cores for this run (e.g. drawing while computing); same numbers
    schedule = getattr(model, "schedule", None)
    with contextlib.nullcontext() if schedule is None or path is not None else schedule(X0, steps):
        for k in tqdm(range(1, steps + 1), desc=desc, disable=not progress, leave=False, mininterval=0.5):
            X = check_finite(model.step(X, dt, Draws(generator, path, k - 1, steps)), k, context, what)
            if hook is not None:
                new = hook(k, X)
                X = X if new is None else new
            keep(k, X)
    ds = _dataset(X, records, sorted(stat_steps), snapshots, sorted(token_steps), dt, save)
    ds.attrs.update(run_attrs(model, T=T, steps=steps, seed=seed, path=path, device=X0.device))
    return ds


def _dataset(X, records, stat_steps, snapshots, token_steps, dt, save: SaveAt) -> xr.Dataset:
    B, N, d = X.shape
    variables: dict[str, Any] = {}
    coords: dict[str, Any] = {"sample": np.arange(B)}
    if records:
        for name in save.stats:
            variables[name] = (("sample", "time"), torch.stack([r[name] for r in records], dim=-1).double().numpy())
        coords["time"] = ("time", np.asarray(stat_steps) * dt)
        coords["step"] = ("time", np.asarray(stat_steps))
    if snapshots:
        variables["X"] = (("sample", "snapshot", "token", "dim"), torch.stack(snapshots, dim=1).double().numpy())
        coords["snapshot_time"] = ("snapshot", np.asarray(token_steps) * dt)
        coords["snapshot_step"] = ("snapshot", np.asarray(token_steps))
    if save.final:
        variables["X_final"] = (("sample", "token", "dim"), X.detach().cpu().double().numpy())
    return xr.Dataset(variables, coords=coords)


# --------------------------------------------------------------------------- metadata


def describe(obj: Any) -> Any:
    """A JSON-able description of a model part: its class and fields; tensors by shape;
    callables by ``module.name``. Parts not defined by stochformer are listed by :func:`custom_parts`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {"type": _qualname(type(obj))}
        for f in dataclasses.fields(obj):
            if f.name.startswith("_") or not f.repr:
                continue
            out[f.name] = describe(getattr(obj, f.name))
        return out
    if torch.is_tensor(obj):
        return {"tensor": list(obj.shape), "dtype": str(obj.dtype).removeprefix("torch.")}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [describe(v) for v in obj]
    if callable(obj):
        return {"callable": _qualname(obj)}
    return {"type": _qualname(type(obj)), "repr": repr(obj)[:200]}


def custom_parts(obj: Any, where: str = "model") -> list[str]:
    """Where ``obj`` holds classes or callables that are not stochformer's own (user parts)."""
    out: list[str] = []
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if not _own(type(obj)):
            out.append(f"{where}: {_qualname(type(obj))}")
        for f in dataclasses.fields(obj):
            if not f.name.startswith("_") and f.repr:
                out += custom_parts(getattr(obj, f.name), f"{where}.{f.name}")
    elif callable(obj) and not torch.is_tensor(obj) and not isinstance(obj, type):
        if not any(obj is fn for fn in ACTIVATIONS.values()) and not _own(obj):
            out.append(f"{where}: {_qualname(obj)}")
    elif obj is not None and not isinstance(obj, (bool, int, float, str, list, tuple)) and not torch.is_tensor(obj):
        if not _own(type(obj)):
            out.append(f"{where}: {_qualname(type(obj))}")
    return out


def _own(obj: Any) -> bool:
    return (getattr(obj, "__module__", "") or "").startswith("stochformer")


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return f"{module}.{getattr(obj, '__qualname__', getattr(obj, '__name__', repr(obj)))}"


def run_attrs(model: Any, **extra: Any) -> dict[str, Any]:
    """Dataset attributes of a run: the model's description and custom parts, provenance
    (versions, device) and ``extra`` (T, steps, seed, path ...), as NetCDF-safe values."""
    device = extra.pop("device", "cpu")
    path = extra.pop("path", None)
    prov = provenance(device)
    attrs = {
        "model": json.dumps(describe(model)),
        "custom_parts": json.dumps(custom_parts(model)),
        "path": repr(path) if path is not None else "none (normals from the generator)",
        "versions": json.dumps(prov),
        "device": prov["device"],
    }
    for k, v in extra.items():
        attrs[k] = "none" if v is None else (str(v) if k == "seed" else v)  # seeds reach 2⁶⁴ − 1
    return attrs
