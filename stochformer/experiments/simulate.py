"""``simulate``: evolve tokens through the deep transformer or the limit SDE and record the
pairwise statistics (mean/min cosine, E_β) per layer, with their standard errors over samples."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from tqdm.auto import tqdm

from ..activations import Activation, activation_name
from ..attention import DEFAULT_BLOCK, query_chunk
from ..build import Stepper, make_attention, make_stepper
from ..config import RunConfig, as_config
from ..diagnostics import mean_and_se, pair_statistics
from ..io import write_json, write_npz
from ..runtime import DTYPES, make_generator, provenance, resolve_device
from ..sphere import initial_tokens
from ..validation import check_finite


@dataclass
class Trajectory:
    """Recorded statistics of one batch of runs.

    ``stats[name]``: (batch, n_records) at ``layers``; ``paths``: (batch, n_paths, N, d) at
    ``path_layers`` or None; ``final``: (batch, N, d)."""

    layers: np.ndarray
    stats: dict[str, np.ndarray]
    final: np.ndarray
    paths: Optional[np.ndarray] = None
    path_layers: Optional[np.ndarray] = None


def evolve(
    X0: torch.Tensor,
    stepper: Stepper,
    L: int,
    generator: torch.Generator,
    energy_beta: float = 1.0,
    record_every: int = 1,
    path_stride: Optional[int] = None,
    progress: bool = False,
    desc: str = "layers",
    block: Optional[int] = None,
    config: Any = None,
) -> Trajectory:
    """Apply ``stepper`` L times to X0: (batch, N, d), recording statistics every ``record_every``
    layers (layer 0 and L always) and token paths every ``path_stride`` layers. ``block``: Gram
    entries formed at once by the statistics (None: all; memory-linear for many tokens).
    A non-finite state raises :class:`~stochformer.validation.NonFiniteError` naming the layer and
    the likely fields of ``config``."""
    X = check_finite(X0, 0, config)
    layers, records, paths, path_layers = [], [], [], []

    def record(ell: int) -> None:
        layers.append(ell)
        records.append({k: v.detach().cpu() for k, v in pair_statistics(X, energy_beta, block).items()})

    record(0)
    if path_stride:
        paths.append(X.detach().cpu())
        path_layers.append(0)
    for ell in tqdm(range(1, L + 1), desc=desc, disable=not progress, leave=False, mininterval=0.5):
        X = check_finite(stepper.step(X, generator), ell, config)
        if ell % record_every == 0 or ell == L:
            record(ell)
        if path_stride and (ell % path_stride == 0 or ell == L):
            paths.append(X.detach().cpu())
            path_layers.append(ell)
    stats = {k: torch.stack([r[k] for r in records], dim=-1).double().numpy() for k in records[0]}
    return Trajectory(
        layers=np.asarray(layers),
        stats=stats,
        final=X.detach().cpu().double().numpy(),
        paths=torch.stack(paths, dim=1).double().numpy() if path_stride else None,
        path_layers=np.asarray(path_layers) if path_stride else None,
    )


@dataclass
class SimulationResult:
    """What :func:`simulate` returns: the config, the trajectory and the run's provenance."""

    config: RunConfig
    trajectory: Trajectory
    provenance: dict
    elapsed_s: float
    meta: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """Per recorded layer: sample mean and SE of mean cosine, E_β and min cosine."""
        out: dict = {"layers": self.trajectory.layers}
        for name in ("mean_cosine", "energy", "min_cosine"):
            mean, se = mean_and_se(torch.from_numpy(self.trajectory.stats[name]), dim=0)
            out[name], out[f"{name}_se"] = mean.numpy(), se.numpy()
        return out

    def save(self, folder: Path | str) -> None:
        """Write config.json (config, seed, versions, device), summary.json and arrays.npz."""
        folder = Path(folder)
        write_json(folder / "config.json", run_record("simulate", self.config, self.provenance, self.elapsed_s, **self.meta))
        write_json(folder / "summary.json", self.summary())
        t = self.trajectory
        write_npz(folder / "arrays.npz", layers=t.layers, final=t.final, paths=t.paths, path_layers=t.path_layers, **t.stats)


def run_record(command: str, config, provenance: dict, elapsed_s: float, **extra) -> dict:
    """The provenance block written as ``config.json`` by every command."""
    return {
        "command": command,
        "config": config.model_dump(mode="json"),
        "seed": getattr(config, "seed", None),
        "version": provenance.get("stochformer"),
        "versions": provenance,
        "device": provenance.get("device"),
        "elapsed_s": elapsed_s,
        **extra,
    }


def simulate(cfg: RunConfig, progress: bool = False, activation: Optional[Activation] = None) -> SimulationResult:
    """Run ``cfg.batch`` independent samples of ``cfg.dynamics`` for L layers (or SDE steps).

    ``activation``: any elementwise callable φ (torch → torch) used instead of ``cfg.activation``;
    its kernel κ comes from Gauss–Hermite quadrature."""
    cfg = as_config(cfg)
    device = resolve_device(cfg.device)
    dtype = DTYPES[cfg.dtype]
    gen = make_generator(cfg.seed, device)
    start = time.perf_counter()
    X0 = initial_tokens(cfg.init, cfg.batch, cfg.N, cfg.d, gen, dtype, device)
    # many tokens: attention and statistics in blocks of DEFAULT_BLOCK entries, never an (N, N) matrix
    block = DEFAULT_BLOCK if cfg.N * cfg.N > DEFAULT_BLOCK else None
    attention = make_attention(cfg, dtype, device, chunk=query_chunk(cfg.N) if block else None)
    stepper = make_stepper(cfg, dtype, device, attention=attention, activation=activation)
    if stepper.noise is not None:
        stepper.noise.reset(cfg.batch, cfg.d, gen, dtype, device)
    traj = evolve(X0, stepper, cfg.L, gen, cfg.energy_beta, cfg.record_every, cfg.path_stride, progress, cfg.dynamics, block, cfg)
    meta = {} if activation is None else {"activation_callable": activation_name(activation)}
    return SimulationResult(cfg, traj, provenance(device), time.perf_counter() - start, meta)
