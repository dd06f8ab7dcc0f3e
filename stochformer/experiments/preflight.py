"""Pre-flight size check: from a validated config, estimate the peak memory and the run time of a
command before anything is allocated, and refuse a run that cannot fit.

The memory model counts the largest tensors one step holds at once (attention scores and the
Gram matrix of the statistics, the MLP's hidden features and its N × N Gram matrices, the exact
field's covariance and its eigendecomposition, the random features, the attention's d × d
matrices and a resampled attention's per-layer draws) and what a run keeps (recorded statistics,
token paths); every grid point of a grid command (``phase``, ``sweep``, the report's grids) is
estimated and the largest counts; its coefficients were read off measured peaks (``tests/test_preflight.py`` checks the
estimate against the measured peak resident memory, within a factor 2, over a range of sizes).
Times are rough (a fixed cost per step plus the products at `FLOPS` per second): they only
refuse runs that are absurdly long (more than ``max_hours``).

Each experiment's config estimates itself (``estimate(workers)``, next to its fields, from the
cost model here: `simulate_estimate`, `attention_matrices`, `coupling_cost`);
`estimate` and `check_size` take any command's config.
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
#: cost of one bootstrap resample of a fitted rate, seconds (measured: 0.1–0.3 ms on 2 cores for spectrum and converge)
BOOTSTRAP_S = 1e-4
#: cost of one point of phase's predicted boundary, seconds (measured: 0.4 ms on 2 cores)
BOUNDARY_POINT_S = 4e-4
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
    name = max(terms, key=terms.__getitem__)
    return terms[name], name


def _step(cfg: RunConfig, batch: int, N: int) -> tuple[dict[str, float], float]:
    """Working memory terms (bytes) of one step of ``cfg`` with ``batch`` samples of N tokens, and
    its matrix-product flops."""
    from ..config.build import noise_kind

    s = 4 if cfg.dtype == "float32" else 8
    B, d, m, M = batch, cfg.d, cfg.m, cfg.features
    # scores / Gram entries formed at once; random batches attend within p (SPEC §4)
    reach = N if cfg.attention_batch is None else min(N, 2 * cfg.attention_batch)
    pairs = B * min(N * reach, DEFAULT_BLOCK)
    terms = {"N or batch": 3.0 * s * pairs}
    flops = 4.0 * B * N * reach * d
    matrices, matrix_flops = attention_matrices(cfg, B, N)
    if matrices:
        terms["d (the attention's d x d matrices) or batch"] = s * matrices
        flops += matrix_flops
    if cfg.mlp and cfg.noise_scale > 0:
        kind = noise_kind(cfg)
        if kind in ("mlp", "mlp_gaussian"):
            from ..model.noise import gram_output_cheaper

            terms["m, N or batch"] = 1.5 * s * B * N * m
            # the output's normals: through a root of the N × N Gram, or Φ Z' with Z' (m, d)
            gram_out = kind == "mlp_gaussian" and gram_output_cheaper(N, d, m, cfg.device)
            out = N if gram_out else m
            terms[f"d, {'N' if gram_out else 'm'} or batch"] = 2.0 * s * B * d * out
            if kind == "mlp_gaussian" and (gram_out or N < d):  # Y Yᵀ or ΦΦᵀ (B, N, N) and its factor
                terms["N or batch (the MLP's N x N Gram)"] = 3.0 * s * B * N * N
            flops += 4.0 * B * N * m * min(N, d) + 2.0 * B * N * d * out
        elif kind == "exact":
            terms["N or batch (or noise = 'random_features')"] = 8.0 * s * B * N * N
            flops += 10.0 * B * N**3
        elif ":" in kind:  # one's own noise source: only its increment (B, N, d) is known
            terms["N, d or batch (the noise source's increment)"] = 1.0 * s * B * N * d
            flops += 4.0 * B * N * d
        else:
            from ..model.noise import FEATURE_BLOCK

            # the fused increment keeps one feature buffer, for a block of samples; and the normals (B, M, d)
            per = min(B, max(1, FEATURE_BLOCK // (N * M)))
            terms["features or batch"] = 1.0 * s * (per * N + B * d) * M
            flops += 4.0 * B * N * M * d
    return terms, flops


def attention_matrices(cfg: RunConfig, B: int, N: int, d: Optional[int] = None) -> tuple[float, float]:
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
    """Peak memory and time of `simulate` for ``cfg``."""
    B, N = batch or cfg.batch, N or cfg.N
    s = 4 if cfg.dtype == "float32" else 8
    terms, flops = _step(cfg, B, N)
    work, field = _largest(terms)
    state = 8.0 * s * B * N * cfg.d
    records = cfg.L // cfg.record_every + 2
    kept: dict[str, float] = {"L (or raise record_every)": records * RECORD_BYTES,
                              "batch, or L (or raise record_every)": records * RECORD_BYTES_PER_SAMPLE * B}
    if cfg.path_stride:
        kept["path_stride (or N, batch, L)"] = (cfg.L // cfg.path_stride + 2) * 3.0 * 8 * B * N * cfg.d
    kept_bytes, kept_field = _largest(kept)
    total = work + state + sum(kept.values())
    mem_field = field if work >= kept_bytes else kept_field
    seconds = cfg.L * (STEP_OVERHEAD_S + flops / FLOPS) * (2 if cfg.dynamics == "sde" and cfg.integrator == "heun" else 1)
    return Estimate(total, seconds, mem_field, "L, N, batch or m")


def estimate(cfg: Any, workers: int = 1) -> Optional[Estimate]:
    """The estimate for any command's config: a [`RunConfig`][stochformer.config.RunConfig]'s (``simulate``) here, every
    experiment's by its config's own ``estimate(workers)`` (None for a config without one).
    ``workers``: tasks that run at once on this machine (a local process pool)."""
    if isinstance(cfg, RunConfig):
        return simulate_estimate(cfg)
    own = getattr(cfg, "estimate", None)
    return own(workers) if callable(own) else None


def coupling_cost(N: int, d: int, batch: int, per_task: int, widths: list[int], depths: list[int],
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
    """Raise `SizeError` when the estimated peak memory exceeds ``max_memory`` (default:
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
