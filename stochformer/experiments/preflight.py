"""Pre-flight size check: from a validated config, estimate the peak memory and the run time of a
command before anything is allocated, and refuse a run that cannot fit.

The memory model counts the largest tensors one step holds at once (attention scores and the
Gram matrix of the statistics, the MLP's hidden features and its N × N Gram matrices, the exact
field's covariance and its eigendecomposition, the random features, the attention's d × d
matrices and a resampled attention's per-layer draws) and what a run keeps (recorded statistics,
token paths); every grid point of a grid command (``phase``, ``sweep``, the report's grids) is
estimated and the largest counts; its coefficients were read off measured peaks (``tests/test_preflight.py`` checks the
estimate against the measured peak resident memory, within a factor 2, over a range of sizes).
Times are rough (a fixed cost per step plus the products at :data:`FLOPS` per second): they only
refuse runs that are absurdly long (more than ``max_hours``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ..model.attention import DEFAULT_BLOCK
from ..config import ConfigError, RunConfig
from ..core.validation import available_memory

#: sustained matrix-product rate assumed for the time estimate (a modest CPU core)
FLOPS = 5e9
#: fixed cost of one layer or SDE step (Python and kernel launches), seconds
STEP_OVERHEAD_S = 5e-5
#: cost of one entry κ(⟨x_i, x_j⟩) of the exact field's K, in flops (arccos, sin, sqrt and the checks)
KERNEL_ENTRY_FLOPS = 200.0
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


def _largest(terms: dict[str, float]) -> tuple[float, str]:
    name = max(terms, key=terms.get)
    return terms[name], name


def _step(cfg: RunConfig, batch: int, N: int) -> tuple[dict[str, float], float]:
    """Working memory terms (bytes) of one step of ``cfg`` with ``batch`` samples of N tokens, and
    its matrix-product flops."""
    from ..config.build import noise_kind

    s = 4 if cfg.dtype == "float32" else 8
    B, d, m, M = batch, cfg.d, cfg.m, cfg.features
    pairs = B * min(N * N, DEFAULT_BLOCK)  # scores / Gram entries formed at once
    terms = {"N or batch": 3.0 * s * pairs}
    flops = 4.0 * B * N * N * d
    matrices, matrix_flops = _attention_matrices(cfg, B, N)
    if matrices:
        terms["d (the attention's d x d matrices) or batch"] = s * matrices
        flops += matrix_flops
    if cfg.mlp and cfg.noise_scale > 0:
        kind = noise_kind(cfg)
        if kind in ("mlp", "mlp_gaussian"):
            from ..model.noise import gram_output_cheaper

            terms["m or batch"] = 1.5 * s * B * N * m
            # the output's normals: through a root of the N × N Gram, or Φ Z' with Z' (m, d)
            gram_out = kind == "mlp_gaussian" and gram_output_cheaper(N, d, m, cfg.device)
            out = N if gram_out else m
            terms["d, m or batch"] = 2.0 * s * B * d * out
            if kind == "mlp_gaussian" and (gram_out or N < d):  # Y Yᵀ or ΦΦᵀ (B, N, N) and its factor
                terms["N or batch (the MLP's N x N Gram)"] = 3.0 * s * B * N * N
            flops += 4.0 * B * N * m * min(N, d) + 2.0 * B * N * d * out
        elif kind == "exact":
            terms["N or batch (or noise = 'random_features')"] = 8.0 * s * B * N * N
            flops += 10.0 * B * N**3
        else:
            terms["features or batch"] = 2.0 * s * B * (N + d) * M
            flops += 4.0 * B * N * M * d
    return terms, flops


def _attention_matrices(cfg: RunConfig, B: int, N: int, d: Optional[int] = None) -> tuple[float, float]:
    """Entries of the d × d matrices the attention holds (its Q, K, V, A; a variant's identity and
    products; a resampled attention's per-layer draws; the averaged drift's bank of (Q, K) and its
    per-draw scores), and their extra flops per step; ``d`` (default cfg.d): the dimension."""
    if not cfg.attention:
        return 0.0, 0.0
    d, kind = d or cfg.d, cfg.attention_kind
    if kind == "softmax":
        given = sum(getattr(cfg, name) is not None for name in ("Q", "K", "V"))
        return (given + (given > 0)) * float(d * d), 2.0 * B * N * d * d * (given > 0)
    if kind == "resampled":
        return 8.0 * B * d * d, 2.0 * B * (3 * d * d * d + 2 * N * d * d)
    if kind == "averaged":
        M = cfg.attention_draws
        return 2.0 * M * d * d + 3.0 * B * M * N * (d + N), 4.0 * B * M * N * (d * d + N * d)
    return 6.0 * d * d, 4.0 * B * N * d * d


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
    from .chaos import ChaosConfig
    from .converge import ConvergeConfig
    from .joint import JointConfig
    from .phase import PhaseConfig
    from .repulsion import RepulsionConfig
    from .sweep import SweepConfig, plan_sweep
    from .sync import SyncConfig

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
        mem += 8.0 * _attention_matrices(run, min(cfg.samples_per_task, run.batch), run.N)[0]
        return Estimate(mem * workers, seconds / max(1, workers), "model.N, samples_per_task or widths",
                        "depths, refine or model.batch")
    if isinstance(cfg, JointConfig):  # per sample and fine step: K over the joint cloud and its Cholesky factor
        n = cfg.cloud_points
        step = STEP_OVERHEAD_S + (n**3 / 3 + KERNEL_ENTRY_FLOPS * n * n) / FLOPS
        seconds = cfg.model.batch * cfg.refine * max(cfg.path_L) * step
        return Estimate(8.0 * (3 * n * n + 6 * n * cfg.model.d) * workers, seconds / max(1, workers), "N_ref, path_N or model.d",
                        "model.batch, refine, path_L or N_ref")
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
        mem += s * max(_attention_matrices(run, 1, run.N, dim)[0] for dim in cfg.dims)
        heun = 2 if run.integrator == "heun" else 1  # field evaluations per step
        step = STEP_OVERHEAD_S + heun * 2 * 4.0 * (run.N + sum(cfg.sizes)) * run.features * run.d / FLOPS
        if run.noise == "exact":  # one joint cloud of n points: K (κ per entry) and its Cholesky factor per step
            n = run.N + sum(cfg.sizes)
            mem += s * 3.0 * n * n
            step = STEP_OVERHEAD_S + (n**3 / 3 + KERNEL_ENTRY_FLOPS * n * n) / FLOPS
        samples = run.batch + cfg.dims_batch * (len(cfg.dims) - 1)
        return Estimate(mem * workers, run.L * step * samples / max(1, workers), "model.N, model.features or decor_repeats",
                        "model.L, model.N, model.features or model.batch")
    if isinstance(cfg, PhaseConfig):
        batch = 2 * cfg.pairs if cfg.measure == "lyapunov" else cfg.model.batch
        steps = 1.75 if cfg.measure == "lyapunov" and cfg.extrapolate else 1.0  # L, L/2, L/4
        per = [simulate_estimate(cfg.point(x, y), batch=batch) for x in cfg.x_values for y in cfg.y_values]
        top = max(per, key=lambda e: e.bytes)
        axes = f"{cfg.x_field}, {cfg.y_field}"
        field = f"the grid values of {axes}, pairs or model.batch" if top.memory_fields.startswith("N or batch") else \
            f"{top.memory_fields} (the grid values of {axes})"
        return Estimate(top.bytes * workers, steps * sum(e.seconds for e in per) / max(1, workers), field,
                        f"model.L, pairs, model.batch or the grid ({axes})")
    if isinstance(cfg, SyncConfig):
        e = simulate_estimate(cfg.model, batch=max(cfg.model.batch, 2 * cfg.pairs))
        e.memory_fields = "pairs, model.batch or model.N" if e.memory_fields.startswith("N or batch") else e.memory_fields
        return Estimate(e.bytes, e.seconds * 3, e.memory_fields, "model.L, pairs, model.batch or the grid")
    return _other_estimate(cfg, workers)


def _other_estimate(cfg: Any, workers: int) -> Optional[Estimate]:
    """The estimate of ``simulate``, ``motions``, ``spectrum``, ``bridge``, the resampled attention and the
    variants' checks (None for configs it does not know)."""
    from .bridge import BridgeConfig
    from .motions import MotionsConfig
    from .spectrum import SpectrumConfig
    from .variants import ResampledConfig, VariantsConfig

    if isinstance(cfg, RunConfig):
        return simulate_estimate(cfg)
    if isinstance(cfg, SpectrumConfig):
        return spectrum_estimate(cfg)
    if isinstance(cfg, MotionsConfig):  # both dynamics on the pairs, and the scalar reference diffusion
        runs = [simulate_estimate(cfg.model.with_updates(dynamics=k)) for k in ("sde", "transformer")]
        ref = 8.0 * 4 * cfg.reference_paths
        seconds = sum(e.seconds for e in runs) + cfg.reference_paths * cfg.reference_steps * 50 / FLOPS
        return Estimate(max(e.bytes for e in runs) + ref, seconds, "model.batch, model.m or reference_paths",
                        "model.L, model.batch, reference_steps or reference_paths")
    if isinstance(cfg, ResampledConfig):
        runs = [simulate_estimate(cfg.model.with_updates(attention_kind=k, L=max(cfg.depths))) for k in ("resampled", "averaged")]
        scale = sum(cfg.depths) / max(cfg.depths)
        return Estimate(max(e.bytes for e in runs), sum(e.seconds for e in runs) * scale,
                        "model.d, model.batch, model.N or model.attention_draws", "depths, model.batch or model.N")
    if isinstance(cfg, BridgeConfig):  # fresh blocks (4 d² + 2 d m weights) per layer; the predictions' N × N roots
        n = cfg.samples + cfg.pred_samples * (1 + cfg.refine)
        mem = 8.0 * (6 * cfg.d * cfg.d + 3 * cfg.d * cfg.m + 8 * n * cfg.N * (cfg.d + cfg.m + cfg.N))
        flops = sum(cfg.depths) * (cfg.samples * (4 * cfg.d * cfg.d + 2 * cfg.d * cfg.m) * (cfg.N + cfg.d)
                                   + cfg.pred_samples * (1 + cfg.refine) * (10 * cfg.N**3 + 4 * cfg.N * cfg.d * cfg.m))
        return Estimate(mem, sum(cfg.depths) * n * STEP_OVERHEAD_S + flops / FLOPS, "d, m, N, samples or pred_samples",
                        "depths, samples, pred_samples, refine, d or m")
    if isinstance(cfg, VariantsConfig):
        d, m, M = cfg.law_d, cfg.law_m, cfg.attention_draws
        mem = 8.0 * (4 * cfg.law_draws * m * d + 2 * M * d * d + 8 * cfg.samples * M * d)
        flops = cfg.law_draws * 8 * m * d * d + sum(cfg.depths) * cfg.samples * M * 8 * d * d + cfg.flow_steps * 1e4
        return Estimate(mem, flops / FLOPS + sum(cfg.depths) * STEP_OVERHEAD_S, "law_d, law_m, law_draws or attention_draws",
                        "law_draws, law_m, depths, samples or attention_draws")
    return None


#: flops-equivalent of one token's tangent step per sample: per d² (the frame's elementwise work and
#: its renormalisation) and, for the transformer, per d·m (the jet's features and Gram); read off
#: runs on 2 cores (d = 4 and 16: 0.1 s per SDE step of 1000 samples at d = 16, docs/spectrum.md)
SPECTRUM_FLOPS_D2, SPECTRUM_FLOPS_DM = 2000.0, 40.0


def spectrum_estimate(cfg: Any) -> Estimate:
    """Peak memory and time of :func:`~stochformer.experiments.spectrum.run_spectrum`: every level
    (steps L, L/2, L/4; widths m, m/2, m/4) keeps the top vector's log-growth at every step, and
    one step holds the frame, the jet and (transformer) the hidden units of the widest width."""
    run = cfg.model
    B, d, m = run.batch, run.d, run.m
    tr = run.dynamics == "transformer"
    levels = (3 if cfg.extrapolate else 1) * (3 if cfg.width_levels else 1)
    steps = run.L * (1.75 if cfg.extrapolate else 1.0) * (3 if cfg.width_levels else 1)
    kept = 8.0 * B * levels * (run.L + 2 + d)
    work = 8.0 * B * (12.0 * d * d + (4.0 * d * m if tr else 0.0))
    per_step = STEP_OVERHEAD_S * 40 + B * (SPECTRUM_FLOPS_D2 * d * d + (SPECTRUM_FLOPS_DM * d * m if tr else 0.0)) / FLOPS
    return Estimate(kept + work, steps * per_step, "model.batch, model.L, model.d or model.m",
                    "model.L, model.batch, model.d or model.m")


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
