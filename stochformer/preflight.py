"""Pre-flight size check: from a validated config, estimate the peak memory and the run time of a
command before anything is allocated, and refuse a run that cannot fit.

The memory model counts the largest tensors one step holds at once (attention scores and the
Gram matrix of the statistics, the MLP's hidden features, the exact field's covariance and its
eigendecomposition, the random features) and what a run keeps (recorded statistics, token
paths); its coefficients were read off measured peaks (``tests/test_preflight.py`` checks the
estimate against the measured peak resident memory, within a factor 2, over a range of sizes).
Times are rough (a fixed cost per step plus the products at :data:`FLOPS` per second): they only
refuse runs that are absurdly long (more than ``max_hours``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Optional

from .model.attention import DEFAULT_BLOCK
from .config import ConfigError, RunConfig

#: sustained matrix-product rate assumed for the time estimate (a modest CPU core)
FLOPS = 5e9
#: fixed cost of one layer or SDE step (Python and kernel launches), seconds
STEP_OVERHEAD_S = 5e-5
#: bytes one recorded layer costs: a fixed part (three small tensors) and a part per sample (their
#: numbers, the final stacked arrays and the heap fragmentation between them), as measured in
#: tests/test_preflight.py
RECORD_BYTES, RECORD_BYTES_PER_SAMPLE = 2000, 150
#: default ceiling on the estimated run time, hours
MAX_HOURS = 12.0


class SizeError(ConfigError):
    """A run refused by the size check: the message gives the estimate, the limit and the field."""


@dataclass
class Estimate:
    """Peak memory in bytes, rough run time in seconds, and the fields that drive each."""

    bytes: float
    seconds: float
    memory_fields: str
    time_fields: str


def available_memory() -> int:
    """Memory available to a new allocation (``MemAvailable`` on Linux, else physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 1 << 62


def _largest(terms: dict[str, float]) -> tuple[float, str]:
    name = max(terms, key=terms.get)
    return terms[name], name


def _step(cfg: RunConfig, batch: int, N: int) -> tuple[dict[str, float], float]:
    """Working memory terms (bytes) of one step of ``cfg`` with ``batch`` samples of N tokens, and
    its matrix-product flops."""
    from .build import noise_kind

    s = 4 if cfg.dtype == "float32" else 8
    B, d, m, M = batch, cfg.d, cfg.m, cfg.features
    pairs = B * min(N * N, DEFAULT_BLOCK)  # scores / Gram entries formed at once
    terms = {"N or batch": 3.0 * s * pairs}
    flops = 4.0 * B * N * N * d
    if cfg.mlp and cfg.noise_scale > 0:
        kind = noise_kind(cfg)
        if kind in ("mlp", "mlp_gaussian"):
            from .model.noise import _gram_output_cheaper

            terms["m or batch"] = 1.5 * s * B * N * m
            # the output's normals: through a root of the N × N Gram, or Φ Z' with Z' (m, d)
            out = N if kind == "mlp_gaussian" and _gram_output_cheaper(N, d, m, cfg.device) else m
            terms["d, m or batch"] = 2.0 * s * B * d * out
            flops += 4.0 * B * N * m * min(N, d) + 2.0 * B * N * d * out
        elif kind == "exact":
            terms["N or batch (or noise = 'random_features')"] = 8.0 * s * B * N * N
            flops += 10.0 * B * N**3
        else:
            terms["features or batch"] = 2.0 * s * B * (N + d) * M
            flops += 4.0 * B * N * M * d
    return terms, flops


def simulate_estimate(cfg: RunConfig, batch: Optional[int] = None, N: Optional[int] = None) -> Estimate:
    """Peak memory and time of :func:`~stochformer.experiments.simulate.simulate` for ``cfg``."""
    B, N = batch or cfg.batch, N or cfg.N
    s = 4 if cfg.dtype == "float32" else 8
    terms, flops = _step(cfg, B, N)
    work, field = _largest(terms)
    state = 8.0 * s * B * N * cfg.d
    records = cfg.L // cfg.record_every + 2
    kept = {"L (or raise record_every)": records * (RECORD_BYTES + RECORD_BYTES_PER_SAMPLE * B)}
    if cfg.path_stride:
        kept["path_stride (or N, batch, L)"] = (cfg.L // cfg.path_stride + 2) * 3.0 * 8 * B * N * cfg.d
    kept_bytes, kept_field = _largest(kept)
    total = work + state + sum(kept.values())
    mem_field = field if work >= kept_bytes else kept_field
    seconds = cfg.L * (STEP_OVERHEAD_S + flops / FLOPS) * (2 if cfg.dynamics == "sde" and cfg.integrator == "heun" else 1)
    return Estimate(total, seconds, mem_field, "L, N, batch or m")


def estimate(cfg: Any, workers: int = 1) -> Optional[Estimate]:
    """The estimate for any command's config (None for configs it does not know). ``workers``:
    tasks that run at once on this machine (a local process pool)."""
    from .experiments.chaos import ChaosConfig
    from .experiments.converge import ConvergeConfig
    from .experiments.joint import JointConfig
    from .experiments.phase import PhaseConfig
    from .experiments.repulsion import RepulsionConfig
    from .experiments.sweep import SweepConfig, plan_sweep
    from .experiments.sync import SyncConfig

    if isinstance(cfg, SweepConfig):
        plan = plan_sweep(cfg)
        per = [simulate_estimate(c, batch=plan.task_sizes[0]) for c in plan.configs]
        n_layers = max(c.L // c.record_every + 2 for c in plan.configs)
        dataset = 3 * 150.0 * len(plan.configs) * cfg.samples * n_layers
        task_mem = max(e.bytes for e in per)
        seconds = sum(e.seconds for e in per) * len(plan.task_sizes) / max(1, workers)
        field = "samples, grid size or model.L" if dataset > task_mem * workers else max(per, key=lambda e: e.bytes).memory_fields
        return Estimate(task_mem * workers + dataset, seconds, field, "samples, grid size, model.L or model.N")
    if isinstance(cfg, ConvergeConfig):
        run = cfg.model
        mem, seconds = _coupling_cost(run.N, run.d, run.batch, cfg.samples_per_task, cfg.widths, cfg.depths, cfg.refine)
        return Estimate(mem * workers, seconds / max(1, workers), "model.N, samples_per_task or widths",
                        "depths, refine or model.batch")
    if isinstance(cfg, JointConfig):
        costs = [_coupling_cost(N, cfg.model.d, cfg.model.batch, cfg.samples_per_task, [m], [L], cfg.refine)
                 for N, L, m in zip(cfg.path_N, cfg.path_L, cfg.path_m)]
        w2 = estimate(cfg.chaos_config())
        assert w2 is not None
        mem = max(max(c[0] for c in costs), w2.bytes)
        return Estimate(mem * workers, (sum(c[1] for c in costs) + w2.seconds) / max(1, workers),
                        "path_N, samples_per_task, N_ref or features", "path_N, path_L, batch, N_ref or w2_batch")
    if isinstance(cfg, RepulsionConfig):
        points = [simulate_estimate(cfg.point(g, s)) for g in cfg.gammas for s in cfg.sigmas]
        probe = simulate_estimate(cfg.point(*cfg.probe), batch=cfg.pairs, N=2)
        seconds = sum(e.seconds for e in points) + 1.75 * probe.seconds  # the probe's L, L/2, L/4 steps
        return Estimate(max(e.bytes for e in points + [probe]) * workers, seconds / max(1, workers),
                        "N, batch or pairs", "L, batch, pairs or the grid")
    if isinstance(cfg, ChaosConfig):
        run = cfg.model
        s = 8
        rows = min(run.N, max(1, DEFAULT_BLOCK // run.features))
        mem = s * (6.0 * (run.N + sum(cfg.sizes)) * max(cfg.dims) + 3.0 * rows * run.features + run.features * max(cfg.dims))
        mem += s * 3.0 * min(run.N, cfg.exact_ot_max) ** 2 + s * 6.0 * cfg.decor_repeats * max(cfg.decor_sizes) * max(cfg.dims)
        heun = 2 if run.integrator == "heun" else 1  # field evaluations per step
        step = STEP_OVERHEAD_S + heun * 2 * 4.0 * (run.N + sum(cfg.sizes)) * run.features * run.d / FLOPS
        samples = run.batch + cfg.dims_batch * (len(cfg.dims) - 1)
        return Estimate(mem * workers, run.L * step * samples / max(1, workers), "model.N, model.features or decor_repeats",
                        "model.L, model.N, model.features or model.batch")
    if isinstance(cfg, (SyncConfig, PhaseConfig)):
        e = simulate_estimate(cfg.model, batch=max(cfg.model.batch if isinstance(cfg, SyncConfig) else 0, 2 * cfg.pairs))
        points = len(cfg.x_values) * len(cfg.y_values) if isinstance(cfg, PhaseConfig) else 3
        e.memory_fields = "pairs, model.batch or model.N" if e.memory_fields.startswith("N or batch") else e.memory_fields
        return Estimate(e.bytes * (workers if isinstance(cfg, PhaseConfig) else 1), e.seconds * points / max(1, workers),
                        e.memory_fields, "model.L, pairs, model.batch or the grid")
    if isinstance(cfg, RunConfig):
        return simulate_estimate(cfg)
    return None


def _coupling_cost(N: int, d: int, batch: int, per_task: int, widths: list[int], depths: list[int],
                   refine: int) -> tuple[float, float]:
    """Peak bytes and seconds of the transformer–SDE coupling (``converge``'s tasks): every width and
    m = ∞ stepped together, the SDE on ``refine`` steps per layer, N³ for each symmetric root."""
    B, n_models = min(per_task, batch), len(widths) + 1
    mem = 8.0 * B * (2.0 * N * max(widths) + 8.0 * N**2 + 4.0 * (n_models + 2) * N * d)
    step = STEP_OVERHEAD_S * (n_models + 2) + B * n_models * (2.0 * N * max(widths) * d + 10 * N**3) / FLOPS
    steps = sum(refine * L for L in depths) * math.ceil(batch / per_task)
    return mem, steps * step


def _gb(x: float) -> str:
    return f"{x / 2**30:.3g} GiB"


def parse_size(text: str) -> int:
    """``'8G'``, ``'512M'``, ``'2.5GiB'``, ``'1000000'`` → bytes; ``ValueError`` otherwise."""
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if t[-1:] in "KMGT" else t) * mult
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"--max-memory: expected a size such as 8G, 512M or 2.5GiB (got {text!r})")
    return int(value)


def check_size(cfg: Any, max_memory: Optional[int] = None, max_hours: float = MAX_HOURS, workers: int = 1) -> Optional[Estimate]:
    """Raise :class:`SizeError` when the estimated peak memory exceeds ``max_memory`` (default:
    the memory available now) or the estimated run time exceeds ``max_hours``."""
    est = estimate(cfg, workers)
    if est is None:
        return None
    limit = available_memory() if max_memory is None else max_memory
    hint = "or pass --no-size-check to run anyway"
    if est.bytes > limit:
        source = "--max-memory" if max_memory is not None else "memory available now"
        raise SizeError(f"size check: this run needs about {_gb(est.bytes)} of memory (estimate), more than the "
                        f"{_gb(limit)} limit ({source}); reduce {est.memory_fields}, {hint}")
    if est.seconds > max_hours * 3600:
        raise SizeError(f"size check: this run would take about {est.seconds / 3600:.3g} hours (rough estimate), more "
                        f"than the {max_hours:g} hour limit; reduce {est.time_fields}, {hint}")
    return est
