"""``joint``: Corollary 1.3, the joint limit N, L, m → ∞, measured on the quantity it bounds (SPEC §3–§4).

Corollary 1.3 bounds E sup_t W₂²(μ^{N,L,m}_t, μ_t), μ^{N,L,m}_t the empirical measure of the
transformer's N tokens at layer ⌊Lt/T⌋ and μ_t the SPDE's solution, in two forms:

(i) the iterated limit lim_N lim_L lim_m = 0, with the bound 2c_N e^{c_N T²}(log L/L + 1/m) + 2c_T r_d(N)
    (any φ; its constant depends on N);
(ii) for a C^∞ activation, the three limits commute with the bound c_T(log L/L + m^{−1/4} + r_d(N)).

**The coupling (the field coupling).** One exact field W drives everything of a sample: the
reference, N_ref SDE particles standing for μ_t, and the systems compared with it. On the fine grid
of ``refine · max(path_L)`` steps the field's increment is drawn jointly at every point of every
system ([`JointField`][stochformer.model.grouped.JointField]: one Gaussian vector with covariance
K_ij = κ(⟨x_i, x_j⟩) over the whole cloud). A transformer layer ℓ of step Δ = T/L holds its MLP's
input Y_ℓ ([`mlp_input`][stochformer.model.transformer.Transformer.mlp_input]) fixed over its window of
fine steps, so the sum G of the field's increments at Y_ℓ over the window is W(t_{ℓ+1}, Y_ℓ) −
W(t_ℓ, Y_ℓ) ~ N(0, Δ K(Y_ℓ)); its normals Ξ = (Δ K(Y_ℓ))^{−1/2} G ([`whiten`][stochformer.model.noise.whiten])
drive the MLP's exact conditional law √Δ s K_m(Y_ℓ)^{1/2} Ξ (SPEC §3, "Measuring it"). So each
transformer is driven by the same field as the reference, at its own tokens, and each has its law.
Every system starts from the first N of the reference's i.i.d. uniform initial tokens (as in
``chaos``); W₂² to the reference is divided by 1 − N/N_ref, the finite reference removed.

Measured per sample, sup over the layer times t = jT/L_0 of the shallowest depth (layer times of
every depth on the path; W₂² exact, POT):

* ``diagonal``: W₂²(μ^{N_k,L_k,m_k}_t, μ_t) of the transformer at each point of the diagonal path
  N, L, m ∝ s (form (ii): decays in s at least at the slowest local exponent of log L/L, m^{−1/4}
  and r_d(N));
* ``inner``: at the fixed N = ``iterated_N``, |W₂²(μ^{N,L_k,m_k}_t, μ_t) − W₂²(μ^N_{SDE,t}, μ_t)|, the
  transformer against its own L, m → ∞ limit, the N-particle SDE from the same tokens (form (i)'s
  inner limits: |a² − b²| ≤ W₂(a, b)(2b + W₂(a, b)) and W₂²(a, b) ≤ the coupling's (1/N)Σ|X − X̄|² ≲
  1/L + 1/m at layer times, so it decays in s at least at exponent ½);
* ``sde``: W₂²(μ^{N_k}_{SDE,t}, μ_t) of N_k SDE particles (form (i)'s outer limit, Proposition 1.2:
  the sharp rate of N points on S^{d−1}, below r_d(N)).

The fitted exponents in s resample the samples jointly across the path (every point of a sample
sees one field), Student's t intervals ([`stochformer.measure.stats.fit_power_law`][stochformer.measure.stats.fit_power_law]).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional, cast

import numpy as np
import torch
import xarray as xr
from pydantic import Field, model_validator

from ..core.brownian import BrownianPath, Draws
from ..config.build import initial_tokens, make_grouped_particles, make_model, setup
from ..config import ExperimentConfig, as_config
from ..measure.distances import rate_function, sphere_rate, w2_exact
from ..model.noise import whiten
from ..model.transformer import Transformer
from ..io.results import Result
from ..core.runtime import child_seeds
from ..measure.stats import fit_power_law, loglog_slope
from ..tasks import Task, run_tasks
from ..core.validation import validated
from .preflight import FLOPS, KERNEL_ENTRY_FLOPS, STEP_OVERHEAD_S, Estimate

#: the measured families, each (samples, points): see the module docstring
MEASURED = ("diagonal", "inner", "sde")


class JointConfig(ExperimentConfig):
    """``model``: the system (d, T, activation, attention …; ``model.batch`` samples, each one field,
    one set of initial tokens and one draw of every transformer's weights); the diagonal path
    ``path_N`` × ``path_L`` × ``path_m`` (equal lengths, every entry the first times one scale s),
    the fixed N of the iterated form's inner limits, and the reference."""

    command: ClassVar[str] = "joint"
    needs_noise: ClassVar[bool] = True
    model_defaults: ClassVar[dict] = {"d": 3, "T": 1.0, "batch": 32}
    model_min: ClassVar[dict] = {"d": (3, "the sharp W2 rate of N points is for S^{d-1} with d >= 3"),
                                 "batch": (4, "samples (a field, initial tokens and weights each)")}
    model_unused: ClassVar[dict] = {"N": "path_N", "L": "path_L", "m": "path_m",
                                    "dynamics": "the transformers and the SDE systems both run",
                                    "noise": "the field is the exact K^{1/2}Ξ, drawn jointly at every system's points",
                                    "features": "the field is the exact one"}

    path_N: list[int] = Field(default_factory=lambda: [16, 32, 64, 128], min_length=3, description="tokens N_k")
    path_L: list[int] = Field(default_factory=lambda: [8, 16, 32, 64], min_length=3, description="depths L_k")
    path_m: list[int] = Field(default_factory=lambda: [16, 32, 64, 128], min_length=3, description="widths m_k")
    iterated_N: Optional[int] = Field(None, ge=2, description="tokens of the iterated form's inner limits, the "
                                                              "(L, m) of the path at this N (default: path_N[1])")
    samples_per_task: int = Field(8, ge=1, description="samples per task (>= 1)")
    refine: int = Field(4, ge=1, le=256, description="SDE steps per layer of the deepest transformer, in [1, 256]")
    N_ref: int = Field(1024, ge=16, description="tokens of the reference system standing for mu_t (> max path_N)")
    bootstrap: int = Field(1000, ge=100, le=1000000, description="bootstrap resamples of the fitted exponents, in [100, 10^6]")

    @model_validator(mode="after")
    def _path(self) -> "JointConfig":
        n = len(self.path_N)
        if len(self.path_L) != n or len(self.path_m) != n:
            raise ValueError(f"path_L, path_m: need as many entries as path_N ({n})")
        for name in ("path_N", "path_L", "path_m"):
            v = getattr(self, name)
            if any(b <= a for a, b in zip(v, v[1:])) or v[0] < 2:
                raise ValueError(f"{name}: must increase strictly from >= 2 (got {v})")
        scales = [np.asarray(getattr(self, f), float) / getattr(self, f)[0] for f in ("path_N", "path_L", "path_m")]
        if not (np.allclose(scales[0], scales[1]) and np.allclose(scales[0], scales[2])):
            raise ValueError("path_N, path_L, path_m: must grow by the same factors (a diagonal path: N_k/N_0 = "
                             f"L_k/L_0 = m_k/m_0; got N {self.path_N}, L {self.path_L}, m {self.path_m})")
        L = self.path_L
        if any(L[-1] % x or x % L[0] for x in L):
            raise ValueError(f"path_L: every depth must divide the largest and be a multiple of the smallest (got {L}), "
                             "so that one fine grid serves every depth and the shallowest one's layer times are "
                             "layer times of all")
        if self.N_ref <= max(self.path_N + [self.inner_N]):
            raise ValueError(f"N_ref: must exceed the largest path_N and iterated_N, {max(self.path_N + [self.inner_N])} "
                             f"(got {self.N_ref})")
        run = self.model
        if run.init.kind != "uniform" or any(getattr(run, k) is not None for k in ("Q", "K", "V")):
            raise ValueError("model.init.kind, model.Q, model.K, model.V: the joint limit needs uniform i.i.d. tokens "
                             "and beta/gamma attention")
        return self

    @property
    def inner_N(self) -> int:
        """The N of the inner limits: ``iterated_N``, by default ``path_N[1]``."""
        return self.path_N[1] if self.iterated_N is None else self.iterated_N

    @property
    def cloud_points(self) -> int:
        """Points of the joint cloud at every fine step: the SDE systems (each N of the path, the inner
        N if it is not one, the reference) and the transformers (the path, and the path's (L, m) at
        the inner N)."""
        sde = sum(self.path_N) + (0 if self.inner_N in self.path_N else self.inner_N) + self.N_ref
        return sde + sum(self.path_N) + len(self.path_N) * self.inner_N

    @property
    def scale(self) -> np.ndarray:
        """The path's scale s_k = N_k/N_0."""
        return np.asarray(self.path_N, float) / self.path_N[0]

    def predicted_exponent(self) -> dict:
        """Local exponents in s along the path: ``N`` of the sharp W₂² rate of N points on the sphere,
        ``log_L`` of log L/L, ``r_d`` of Proposition 1.2's r_d(N), ``m_quarter`` = 1/4;
        ``commuting``: form (ii), min(log_L, 1/4, r_d); ``inner``: form (i)'s inner limits at layer
        times, ½ · min(1 (of 1/L), 1 (of 1/m)) = ½."""
        N, L = np.asarray(self.path_N, float), np.asarray(self.path_L, float)
        p_N = -loglog_slope(N, sphere_rate(self.model.d, N))[0]
        p_r = -loglog_slope(N, rate_function(self.model.d, N))[0]
        p_L = -loglog_slope(L, np.log(L) / L)[0]
        return {"N": float(p_N), "log_L": float(p_L), "m_quarter": 0.25, "r_d": float(p_r),
                "commuting": float(min(p_L, 0.25, p_r)), "inner": 0.5}

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): per sample and
        fine step: K over the joint cloud and its Cholesky factor."""
        n = self.cloud_points
        step = STEP_OVERHEAD_S + (n**3 / 3 + KERNEL_ENTRY_FLOPS * n * n) / FLOPS
        seconds = self.model.batch * self.refine * max(self.path_L) * step
        return Estimate(8.0 * (3 * n * n + 6 * n * self.model.d) * workers, seconds / max(1, workers), "N_ref, path_N or model.d",
                        "model.batch, refine, path_L or N_ref")


@dataclass(repr=False)
class JointResult(Result):
    """``measured``: {``diagonal``, ``inner``, ``sde``: (samples, points)} sup-in-time values (module
    docstring); ``fits``: their exponents in s with intervals; ``predicted``: the rates."""

    command: ClassVar[str] = "joint"
    summary_name: ClassVar[str] = "joint.json"
    config: JointConfig
    measured: dict
    fits: dict
    predicted: dict
    provenance: dict
    elapsed_s: float

    def means(self) -> dict:
        """Mean and SE over the samples of each measured family at every point of the path."""
        n = self.config.model.batch
        return {k: (v.mean(0), v.std(0, ddof=1) / math.sqrt(n)) for k, v in self.measured.items()}

    def to_dict(self) -> dict:
        c = self.config
        means = {k: {"mean": m, "se": s} for k, (m, s) in self.means().items()}
        return {"path_N": c.path_N, "path_L": c.path_L, "path_m": c.path_m, "iterated_N": c.inner_N, "scale": c.scale,
                "samples": c.model.batch, **means, "fits": self.fits, "predicted": self.predicted,
                "elapsed_s": self.elapsed_s}

    def names(self) -> dict[str, dict[str, str]]:
        return {
            "diagonal": {"long_name": "sup_t W₂²(μ^(N,L,m)_t, μ_t) of the transformer on the diagonal path", "units": "1"},
            "inner": {"long_name": "sup_t |W₂²(μ^(N,L,m)_t, μ_t) − W₂²(μ^N_(SDE,t), μ_t)| at N = iterated_N", "units": "1"},
            "sde": {"long_name": "sup_t W₂²(μ^N_(SDE,t), μ_t) of N SDE particles", "units": "1"},
        }

    def _dataset(self) -> xr.Dataset:
        return xr.Dataset({k: (("sample", "point"), v) for k, v in self.measured.items()},
                          coords={"N": ("point", self.config.path_N), "L": ("point", self.config.path_L),
                                  "m": ("point", self.config.path_m)})


def _w2(A: torch.Tensor, B: np.ndarray) -> float:
    """W₂²(μ_A, μ_B)/(1 − n_A/n_B): A (n_A, d) against the reference B (n_B, d), float64 numpy."""
    return w2_exact(A.double().cpu().numpy(), B).value / (1 - A.shape[0] / B.shape[0])


def coupled_sample(cfg: JointConfig, seed: int) -> dict[str, list[float]]:
    """One sample of the field coupling (module docstring): {``diagonal``, ``inner``, ``sde``: one
    sup-in-time value per point of the path}. ``seed`` fixes the initial tokens, the field and the
    transformers' weights."""
    run = cfg.model
    env = setup(run)
    device, dtype = env.device, env.dtype
    g_init, g_field, g_w = env.generators(3, seed)
    X0 = initial_tokens(run.init, 1, cfg.N_ref, run.d, g_init, dtype, device)
    path = list(zip(cfg.path_N, cfg.path_L, cfg.path_m))
    N_in = cfg.inner_N
    # the SDE systems: one per N of the path (and the inner N if it is not one), then the reference
    sizes = list(cfg.path_N) + ([] if N_in in cfg.path_N else [N_in]) + [cfg.N_ref]
    sde = make_grouped_particles(run.model_copy(update={"dynamics": "sde"}), sizes, dtype, device)
    inner_sde = sizes.index(N_in)
    # the transformers: the diagonal path, then the (L, m) of the path at the inner N
    runs = path + [(N_in, L, m) for _, L, m in path]
    # dynamics = "transformer": make_model builds a Transformer
    models = [cast(Transformer, make_model(run.model_copy(update={"dynamics": "transformer", "N": N, "m": m, "L": L}),
                                           dtype, device)) for N, L, m in runs]
    for model in models:
        model.reset(1, run.d, g_w, dtype, device)
    sde.reset(1, run.d, g_field, dtype, device)
    field = sde.noise.field  # type: ignore[union-attr]
    fine = cfg.refine * max(cfg.path_L)
    dt = run.T / fine
    every = [fine // L for _, L, _ in runs]  # fine steps per layer
    X = [X0[:, :N].clone() for N, _, _ in runs]
    Y = [model.mlp_input(x, run.T / L) for model, x, (_, L, _) in zip(models, X, runs)]
    G = [torch.zeros_like(y) for y in Y]
    S = torch.cat([X0[:, :n] for n in sizes[:-1]] + [X0], dim=1)
    n_S = S.shape[1]
    K = len(path)
    sup = {k: np.zeros(K) for k in MEASURED}

    def record() -> None:
        systems = S[0].split(sizes)
        ref = systems[-1].double().cpu().numpy()  # once per record, for every system
        w_sde = [_w2(x, ref) for x in systems[:-1]]
        w_T = [_w2(x[0], ref) for x in X]
        for k in range(K):
            sup["diagonal"][k] = max(sup["diagonal"][k], w_T[k])
            sup["inner"][k] = max(sup["inner"][k], abs(w_T[K + k] - w_sde[inner_sde]))
            sup["sde"][k] = max(sup["sde"][k], w_sde[k])

    record_every = fine // cfg.path_L[0]
    record()
    for s in range(fine):
        # the SDE systems first: a Cholesky factor's leading block is that of K over them alone, so
        # their field (and the reference) is the same whatever the transformers do
        dW = sde.noise.increment(torch.cat([S] + Y, dim=1), dt, Draws(g_field))  # type: ignore[union-attr]
        parts = dW[:, n_S:].split([N for N, _, _ in runs], dim=1)
        S = sde.integrator.step(sde, S, dt, dW[:, :n_S])
        for j, (model, (_, L, _)) in enumerate(zip(models, runs)):
            G[j] = G[j] + parts[j]
            if (s + 1) % every[j]:
                continue
            Delta = run.T / L
            xi = whiten(field.covariance(Y[j], torch.float64)[0], G[j][0] / math.sqrt(Delta), g_w).to(dtype)
            draws = Draws(g_w, BrownianPath.from_normals(xi[None, None]), 0, 1)
            noise = model.noise
            assert noise is not None, "coupled_sample: every transformer has the MLP (the noise is on)"
            X[j] = model.layer(X[j], Delta, lambda y: noise.increment(y, Delta, draws))
            Y[j], G[j] = model.mlp_input(X[j], Delta), torch.zeros_like(G[j])
        if (s + 1) % record_every == 0:
            record()
    return {k: v.tolist() for k, v in sup.items()}


def _samples_task(config: dict, seeds: list[int]) -> dict[str, list[list[float]]]:
    """One task: the samples of ``seeds`` (module level, JSON-able)."""
    cfg = JointConfig.model_validate(config)
    with torch.no_grad():
        rows = [coupled_sample(cfg, seed) for seed in seeds]
    return {k: [r[k] for r in rows] for k in MEASURED}


@validated
def run_joint(cfg: JointConfig, progress: bool = False, store: Optional[Path | str] = None,
              scheduler: Optional[str] = None) -> JointResult:
    """The field coupling's sup-in-time W₂² along the path, ``samples_per_task`` samples a task
    (``store`` makes the run resumable), then the fits."""
    cfg = as_config(cfg, JointConfig)
    start = time.perf_counter()
    run = cfg.model
    seeds = child_seeds(run.seed, run.batch)
    parts = [seeds[a:a + cfg.samples_per_task] for a in range(0, run.batch, cfg.samples_per_task)]
    config = cfg.model_dump(mode="json")
    tasks = [Task(f"samples-{c}", _samples_task, dict(config=config, seeds=part)) for c, part in enumerate(parts)]
    results = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="joint")
    measured = {k: np.concatenate([np.asarray(results[t.key][k], float) for t in tasks]) for k in MEASURED}
    fits = {}
    for name, values in measured.items():
        fit = fit_power_law(cfg.scale, values, cfg.bootstrap, run.seed)
        fits[name] = {"exponent": fit.exponent, "ci": list(fit.ci), "se": fit.se, "prefactor": fit.prefactor, "n": fit.n}
    return JointResult(cfg, measured, fits, cfg.predicted_exponent(), setup(cfg).provenance(),
                       time.perf_counter() - start)
