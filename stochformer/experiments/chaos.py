"""``chaos``: propagation of chaos, Proposition 1.2 (SPEC §4), measured three ways.

With a common noise the limit μ_t is *random*: it is the conditional law of a token given the
field. Every comparison below therefore keeps the field fixed: the reference system of N_ref
tokens (``N``) and the systems of N < N_ref tokens (``sizes``) are driven by the same field.

- ``model.noise = "random_features"``: the same random-feature field (same frozen features, same
  Brownian increments); it is a function of position, so each system is solved on its own.
- ``model.noise = "exact"``: the exact field K^{1/2}Ξ, whose law at a set of points is defined
  through K on all of them: the reference and every N-system are concatenated into one cloud of
  N_ref + Σ sizes tokens and stepped once ([`stochformer.model.grouped`][stochformer.model.grouped]): one joint Gaussian
  increment for every point of every system (Cholesky factor of the joint K), attention within
  each system. O((N_ref + Σ sizes)³) per step. The decorrelation (3.) stays random-feature: it
  holds one field over ``decor_repeats`` clouds, ``decor_repeats``·N points at once.

1. **Synchronous coupling.** The N-system starts from the first N initial points of the reference.
   Per sample, ``err2(t) = (1/N) Σ_{i≤N} |X^{i,N}_t − X^{i,N_ref}_t|²`` and its sup over the
   recorded times. Expected ≈ C (1/N − 1/N_ref): the first N tokens' empirical measure differs
   from the reference's by a fluctuation of variance 1/N − 1/N_ref. ``exponent_coupling`` is the
   fitted decay exponent of the sample mean of sup_t err2 (target 1), with a 95% bootstrap interval
   over samples; the fit of err2/(1 − N/N_ref) (the finite-reference factor removed) is reported
   beside it.
2. **W₂².** ``W₂²(μ^N_t, μ^{N_ref}_t)`` between the empirical measures, exact (POT network simplex,
   iteration cap raised, warnings recorded) when both clouds have at most ``exact_ot_max``
   points, else sliced W₂² (labelled); the sliced distance is also given everywhere. Fitted against
   N beside r_d(N) for each d in ``dims``.
3. **Conditional decorrelation.** One field held fixed, ``decor_repeats`` independent uniform
   initial clouds of N tokens; the correlation of tokens 1 and 2 at time T over the repeats
   ([`tagged_correlation`][stochformer.measure.stats.tagged_correlation]), averaged over ``decor_fields`` fields,
   against N (expected O(1/N)).

The reference's empirical measure is summarised by E_β and the mean token over time, and for
d = 3 by its final tokens (density picture).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np
import torch
import xarray as xr
from pydantic import Field, model_validator

from ..core.brownian import BrownianPath
from ..config.build import make_field, make_grouped_particles, make_particles, setup
from ..config import ExperimentConfig, MEASURED_HORIZON, RunConfig, as_config, validate
from ..measure.diagnostics import cloud_summary
from ..core.extras import require
from ..measure.distances import rate_function, sphere_rate, w2_sliced, w2_squared
from ..model.attention import DEFAULT_BLOCK
from ..io.names import TIME_UNITS
from ..io.results import Result
from ..core.runtime import child_seeds, cpu_threads_for, make_generator
from ..integrate import SaveAt, solve
from ..core.sphere import uniform
from ..measure.stats import fit_power_law, fit_power_law_weighted, loglog_slope, mean_and_se, tagged_correlation
from ..tasks import Task, run_tasks
from ..core.validation import blamed_on, validated
from .preflight import FLOPS, KERNEL_ENTRY_FLOPS, STEP_OVERHEAD_S, Estimate, attention_matrices


class ChaosConfig(ExperimentConfig):
    """``model``: the limit SDE driven by a random-feature field or the exact field
    (``model.noise``; ``model.N`` is the reference size N_ref, ``model.batch`` the number of
    independent samples, field and initial draw, for d = model.d); the sizes of the three
    propagation-of-chaos measurements."""

    command: ClassVar[str] = "chaos"
    model_fixed: ClassVar[dict] = {"dynamics": ("sde", "chaos integrates the limit SDE")}
    #: the fields that can couple systems of different N (module docstring)
    noises: ClassVar[tuple[str, ...]] = ("random_features", "exact")
    model_defaults: ClassVar[dict] = {"integrator": "euler", "N": 2048, "T": 1.0, "L": 40, "batch": 64, "features": 512,
                                      "noise": "random_features"}
    model_min: ClassVar[dict] = {"N": (16, "tokens of the reference system N_ref"), "T": MEASURED_HORIZON,
                                 "batch": (2, "independent samples for d = model.d")}

    sizes: list[int] = Field([16, 32, 64, 128, 256], min_length=3, description="sizes N < N_ref of the coupled systems")
    dims: list[int] = Field([3, 4, 6], min_length=1, description="dimensions for W2 (must contain model.d)")
    dims_batch: int = Field(8, ge=2, description="samples for the dimensions other than model.d (>= 2)")
    records: int = Field(8, ge=1, description="recorded times for the coupling error and summaries (>= 1)")
    w2_records: int = Field(1, ge=1, description="W2 at t = kT/w2_records, k = 0..w2_records (>= 1)")
    w2_batch: int = Field(8, ge=1, description="samples per dimension on which W2 is computed (>= 1)")
    exact_ot_max: int = Field(4096, ge=2, description="exact OT when both clouds have at most this many points")
    sliced_projections: int = Field(200, ge=1, description="directions of the sliced W2 (>= 1)")
    decor_sizes: list[int] = Field([4, 8, 16, 32], min_length=2, description="N of the decorrelation runs (>= 3)")
    decor_repeats: int = Field(2048, ge=16, description="initial draws per field for the decorrelation (>= 16)")
    decor_fields: int = Field(4, ge=1, description="fields over which the conditional correlation is averaged (>= 1)")
    bootstrap: int = Field(2000, ge=100, le=1000000, description="bootstrap resamples for the fitted intervals, in [100, 10^6]")
    block: int = Field(DEFAULT_BLOCK, ge=1024, description="attention score entries formed at once (>= 1024)")
    sdpa: bool = Field(True, description="use torch's fused scaled_dot_product_attention (else query chunks)")
    decorrelation: bool = Field(True, description="run the conditional decorrelation (random-feature field)")

    @model_validator(mode="after")
    def _chaos_checks(self) -> "ChaosConfig":
        run = self.model
        if run.noise not in self.noises:
            raise ValueError(f"model.noise: chaos needs one of {', '.join(map(repr, self.noises))} (a field shared by "
                             f"systems of different N; got {run.noise!r})")
        if any(n < 2 or n >= run.N for n in self.sizes):
            raise ValueError(f"sizes: every size must be in [2, N_ref) with N_ref = model.N = {run.N} (got {self.sizes})")
        if any(n < 3 for n in self.decor_sizes):
            raise ValueError(f"decor_sizes: every size must be >= 3 (got {self.decor_sizes})")
        if run.d not in self.dims or any(d < 2 for d in self.dims):
            raise ValueError(f"dims: must contain model.d = {run.d}, all >= 2 (got {self.dims})")
        if run.Q is not None or run.K is not None or run.V is not None:
            raise ValueError("model.Q, model.K, model.V: chaos runs several dimensions; use beta and gamma")
        if run.init.kind != "uniform":
            raise ValueError("model.init.kind: chaos needs i.i.d. uniform initial tokens ('uniform')")
        return self

    def samples_for(self, d: int) -> int:
        """Samples of the coupling in dimension d.

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        int
            The samples.
        """
        return self.model.batch if d == self.model.d else self.dims_batch

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): the reference and
        the N-systems under one field (random features, or the exact field's joint K), the exact OT plans
        and the decorrelation's repeats.

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        run = self.model
        s = 8
        rows = min(run.N, max(1, DEFAULT_BLOCK // run.features))
        mem = s * (6.0 * (run.N + sum(self.sizes)) * max(self.dims) + 3.0 * rows * run.features + run.features * max(self.dims))
        mem += s * 3.0 * min(run.N, self.exact_ot_max) ** 2 + s * 6.0 * self.decor_repeats * max(self.decor_sizes) * max(self.dims)
        mem += s * max(attention_matrices(run, 1, run.N, dim)[0] for dim in self.dims)
        heun = 2 if run.integrator == "heun" else 1  # field evaluations per step
        step = STEP_OVERHEAD_S + heun * 2 * 4.0 * (run.N + sum(self.sizes)) * run.features * run.d / FLOPS
        if run.noise == "exact":  # one joint cloud of n points: K (κ per entry) and its Cholesky factor per step
            n = run.N + sum(self.sizes)
            mem += s * 3.0 * n * n
            step = STEP_OVERHEAD_S + (n**3 / 3 + KERNEL_ENTRY_FLOPS * n * n) / FLOPS
        samples = run.batch + self.dims_batch * (len(self.dims) - 1)
        return Estimate(mem * workers, run.L * step * samples / max(1, workers), "model.N, model.features or decor_repeats",
                        "model.L, model.N, model.features or model.batch")


def _steps(L: int, k: int) -> list[int]:
    """k + 1 steps 0, L/k, ..., L (rounded, unique)."""
    return sorted({round(j * L / k) for j in range(k + 1)})


# --------------------------------------------------------------------------- tasks


def coupling_task(config: dict, d: int, seed: int, with_w2: bool, keep_cloud: bool) -> dict:
    """One sample in dimension d: reference of N_ref tokens and the coupled N-systems (first N
    initial points, same field, same increments; [`coupled_systems`][stochformer.experiments.chaos.coupled_systems]). JSON-able result, per
    recorded time t: ``err2[t][k]`` for ``sizes[k]``, ``w2`` / ``sw2`` at the W₂ times, reference
    summaries.

    Parameters
    ----------
    config : dict
        The ChaosConfig fields.
    d : int
        Token dimension.
    seed : int
        The sample's seed.
    with_w2 : bool
        Also compute W₂ at the W₂ times.
    keep_cloud : bool
        Keep the clouds for the figures.

    Returns
    -------
    dict
        JSON-able errors, distances and summaries per time.
    """
    cfg = validate(ChaosConfig, config)
    run_cfg = cfg.model.model_copy(update={"d": d})
    env = setup(run_cfg)
    device, dtype = env.device, env.dtype
    s_init, s_field, s_noise = env.seeds(3, seed)
    start = time.perf_counter()
    X0 = uniform(1, run_cfg.N, d, generator=env.generator(s_init), dtype=dtype, device=device)
    rec = _steps(run_cfg.L, cfg.records)
    w2_steps = _steps(run_cfg.L, cfg.w2_records) if with_w2 else []
    steps = sorted(set(rec) | set(w2_steps))
    ref, *subs = coupled_systems(cfg, run_cfg, X0, steps, s_field, s_noise)
    at = {s: i for i, s in enumerate(steps)}
    err2 = np.zeros((len(rec), len(cfg.sizes)))
    w2 = np.zeros((len(w2_steps), len(cfg.sizes)))
    sw2 = np.zeros_like(w2)
    warnings_seen: list[str] = []
    methods: set[str] = set()
    for k, (n, sub) in enumerate(zip(cfg.sizes, subs)):
        for j, s in enumerate(rec):
            err2[j, k] = float(((sub[at[s]][0] - ref[at[s]][0, :n]) ** 2).sum(-1).mean())
        for j, s in enumerate(w2_steps):
            A, B = sub[at[s]][0].double().cpu().numpy(), ref[at[s]][0].double().cpu().numpy()
            r = w2_squared(A, B, cfg.exact_ot_max, cfg.sliced_projections, seed=j)
            w2[j, k], methods = r.value, methods | {r.method}
            if r.warning:
                warnings_seen.append(f"N={n}, step {s}: {r.warning}")
            sw2[j, k] = r.value if r.method == "sliced" else w2_sliced(A, B, cfg.sliced_projections, seed=j).value
    summ = [cloud_summary(ref[at[s]], run_cfg.energy_beta, cfg.block) for s in rec]
    out = {
        "err2": err2,
        "w2": w2,
        "sw2": sw2,
        "w2_method": "+".join(sorted(methods)),
        "w2_warnings": warnings_seen,
        "energy": [float(x["energy"][0]) for x in summ],
        "mean_token": [x["mean_token"][0] for x in summ],
        "mean_token_norm": [float(x["mean_token_norm"][0]) for x in summ],
        "elapsed_s": time.perf_counter() - start,
    }
    if keep_cloud:
        out["cloud_initial"] = X0[0]
        out["cloud_final"] = ref[at[run_cfg.L]][0]
    return {k: (v.detach().cpu().double().numpy() if torch.is_tensor(v) else v) for k, v in out.items()}


def coupled_systems(cfg: ChaosConfig, run_cfg: RunConfig, X0: torch.Tensor, steps: list[int], s_field: int,
                    s_noise: int) -> list[list[torch.Tensor]]:
    """The reference (X0: (1, N_ref, d)) and the systems of the first n tokens for n in ``sizes``,
    driven by one field (``run_cfg.noise``: random features drawn from ``s_field``, one Brownian path
    from ``s_noise``; or the exact field, all systems concatenated and stepped once by
    [`make_grouped_particles`][stochformer.config.build.make_grouped_particles], normals from ``s_noise``). Per system, its
    states at ``steps``: a list of (1, n, d).

    Parameters
    ----------
    cfg : ChaosConfig
        The experiment's configuration.
    run_cfg : RunConfig
        The model's configuration in dimension d.
    X0 : torch.Tensor, shape (1, N_ref, d)
        The reference's initial tokens.
    steps : list of int
        The recorded steps.
    s_field : int
        Seed of the random features.
    s_noise : int
        Seed of the normals.

    Returns
    -------
    list of list of torch.Tensor
        Per system (reference first), its states at ``steps``.
    """
    dtype, device = X0.dtype, X0.device
    save = SaveAt(stats=(), tokens_at=steps, final=False)
    T, L = run_cfg.T, run_cfg.L
    if run_cfg.noise == "exact":
        sizes = [X0.shape[-2], *cfg.sizes]
        X = torch.cat([X0, *(X0[:, :n] for n in cfg.sizes)], dim=-2)
        model = make_grouped_particles(run_cfg, sizes, dtype, device, cfg.block, cfg.sdpa)
        with cpu_threads_for(X.shape[-2]), blamed_on(run_cfg, "particles"):
            ds = solve(model, X, T, L, save, seed=s_noise)
        return [list(part.unbind(1)) for part in torch.from_numpy(ds["X"].values).to(dtype).split(sizes, dim=2)]
    fld = make_field(run_cfg, 1, make_generator(s_field, device), dtype, device)
    # one field and one Brownian path (its increments, seeded by s_noise) drive every system
    path = BrownianPath(fld.path_shape(1, run_cfg.d), L, seed=s_noise, dtype=dtype, device=device)

    def run(X: torch.Tensor) -> list[torch.Tensor]:
        model = make_particles(run_cfg, fld, X.shape[-2], dtype, device, cfg.block, cfg.sdpa)
        with cpu_threads_for(X.shape[-2]), blamed_on(run_cfg, "particles"):
            ds = solve(model, X, T, L, save, seed=s_noise, path=path)
        return list(torch.from_numpy(ds["X"].values).to(dtype).unbind(1))

    return [run(X0)] + [run(X0[:, :n].clone()) for n in cfg.sizes]


def decorrelation_task(config: dict, n: int, seed: int) -> dict:
    """One field held fixed, ``decor_repeats`` independent uniform clouds of n tokens: correlation
    of tokens 1 and 2 at time T over the repeats, with its standard error.

    Parameters
    ----------
    config : dict
        The ChaosConfig fields.
    n : int
        Tokens per cloud.
    seed : int
        The field's seed.

    Returns
    -------
    dict
        The correlation and its SE.
    """
    cfg = validate(ChaosConfig, config)
    env = setup(cfg.model)
    device, dtype = env.device, env.dtype
    s_init, s_field, s_noise = env.seeds(3, seed)
    fld = make_field(cfg.model, 1, env.generator(s_field), dtype, device)  # one field for all repeats
    X0 = uniform(cfg.decor_repeats, n, cfg.model.d, generator=env.generator(s_init + n), dtype=dtype, device=device)
    model = make_particles(cfg.model, fld, n, dtype, device, cfg.block, cfg.sdpa)
    with blamed_on(cfg.model, "particles"):
        ds = solve(model, X0, cfg.model.T, cfg.model.L, SaveAt(stats=()), seed=s_noise)  # increments from s_noise
    X = torch.from_numpy(ds["X_final"].values).to(dtype)
    rho, se = tagged_correlation(X[:, 0], X[:, 1])
    return {"rho": rho, "se": se}


# --------------------------------------------------------------------------- result


@dataclass(repr=False)
class ChaosResult(Result):
    """Every table of the chaos experiment (numpy arrays; see [`run_chaos`][stochformer.experiments.chaos.run_chaos]).

    Attributes
    ----------
    config : ChaosConfig
        The configuration run.
    coupling, decorrelation, fits : dict
        The tables.
    provenance : dict
        Versions, platform and device.
    elapsed_s : float
        The run time in seconds.
    clouds : dict
        Clouds kept for the figures.
    """

    command: ClassVar[str] = "chaos"
    summary_name: ClassVar[str] = "chaos.json"
    config: ChaosConfig
    coupling: dict  # per d: {"err2": (S, n_rec, n_sizes), "w2": (S_w2, n_w2, n_sizes), ...}
    decorrelation: Optional[dict]  # None when not run (``decorrelation = false``)
    fits: dict
    provenance: dict
    elapsed_s: float
    clouds: dict = field(default_factory=dict)

    @property
    def exponent_coupling(self) -> float:
        return self.fits["coupling"][str(self.config.model.d)]["exponent"]

    def to_dict(self) -> dict:
        cfg = self.config
        out: dict = {
            "N_ref": cfg.model.N,
            "sizes": cfg.sizes,
            "dims": cfg.dims,
            "record_times": [s * cfg.model.dt for s in _steps(cfg.model.L, cfg.records)],
            "w2_times": [s * cfg.model.dt for s in _steps(cfg.model.L, cfg.w2_records)],
            "exponent_coupling": self.exponent_coupling,
            "exponent_coupling_ci": self.fits["coupling"][str(cfg.model.d)]["ci"],
            "exponent_coupling_ref_corrected": self.fits["coupling_corrected"][str(cfg.model.d)]["exponent"],
            "exponent_coupling_ref_corrected_ci": self.fits["coupling_corrected"][str(cfg.model.d)]["ci"],
            "fits": self.fits,
            "elapsed_s": self.elapsed_s,
            "coupling": {},
            "decorrelation": self.decorrelation,
        }
        for d, tab in self.coupling.items():
            e = tab["err2"]
            stats = {k: mean_and_se(v) for k, v in (("err2", e), ("err2_sup", e.max(axis=1)), ("energy", tab["energy"]),
                                                   ("mean_token_norm", tab["mean_token_norm"]))}
            row = {"samples": e.shape[0]}  # err2: (n_rec, n_sizes)
            for k, (mean, se) in stats.items():
                row[f"{k}_mean"], row[f"{k}_se"] = mean, se
            row.update({
                "mean_token_sample0": tab["mean_token"][0],
                "r_d": rate_function(int(d), cfg.sizes),
                "sphere_rate": sphere_rate(int(d), cfg.sizes),
            })
            if tab["w2"].size:
                w, sw = tab["w2"], tab["sw2"]
                w2, w2_sup, sliced = mean_and_se(w), mean_and_se(w.max(1)), mean_and_se(sw)
                row.update({
                    "w2_samples": w.shape[0],
                    "w2_method": tab["w2_method"],
                    "w2_warnings": tab["w2_warnings"],
                    "w2_mean": w2[0],  # (n_w2_times, n_sizes)
                    "w2_se": w2[1],
                    "w2_sup_mean": w2_sup[0],
                    "w2_sup_se": w2_sup[1],
                    "sliced_w2_mean": sliced[0],
                    "sliced_w2_se": sliced[1],
                })
            out["coupling"][str(d)] = row
        return out

    def names(self) -> dict[str, dict[str, str]]:
        out = {
            "w2_time": {"long_name": "time t of the W₂ records", "units": TIME_UNITS},
            "w2_step": {"long_name": "step (layer) of the W₂ records", "units": "1"},
            "decor_size": {"long_name": "number of tokens N of the decorrelation's clouds", "units": "1"},
            "field": {"long_name": "independent field of the decorrelation", "units": "1"},
            "dim_d3": {"long_name": "coordinate of a token in R^3", "units": "1"},
            "cloud_initial": {"long_name": "initial tokens of the reference system (d = 3)", "units": "1"},
            "cloud_final": {"long_name": "final tokens of the reference system (d = 3)", "units": "1"},
            "decor_rho": {"long_name": "correlation of tokens 1 and 2 at time T over the repeats", "units": "1"},
            "decor_se": {"long_name": "standard error of the correlation of tokens 1 and 2", "units": "1"},
        }
        for d in self.coupling:
            out.update({
                f"sample_d{d}": {"long_name": f"independent sample, d = {d}", "units": "1"},
                f"w2_sample_d{d}": {"long_name": f"independent sample of the W₂ records, d = {d}", "units": "1"},
                f"dim_d{d}": {"long_name": f"coordinate of a token in R^{d}", "units": "1"},
                f"err2_d{d}": {"long_name": f"coupling error (1/N) Σ_(i≤N) |X^(i,N)_t − X^(i,N_ref)_t|², d = {d}", "units": "1"},
                f"energy_d{d}": {"long_name": f"interaction energy E_β of the reference system, d = {d}", "units": "1"},
                f"mean_token_norm_d{d}": {"long_name": f"norm of the reference system's mean token, d = {d}", "units": "1"},
                f"mean_token_d{d}": {"long_name": f"mean token of the reference system, d = {d}", "units": "1"},
                f"w2_d{d}": {"long_name": f"W₂²(μ^N_t, μ^(N_ref)_t), d = {d}", "units": "1"},
                f"sliced_w2_d{d}": {"long_name": f"sliced W₂²(μ^N_t, μ^(N_ref)_t), d = {d}", "units": "1"},
            })
        return out

    def _dataset(self) -> xr.Dataset:
        """Per-sample tables per dimension d: ``err2_d{d}`` (sample, time, size), ``w2_d{d}`` /
        ``sliced_w2_d{d}`` (w2_sample, w2_time, size), ``energy_d{d}``, ``mean_token_norm_d{d}``
        (sample, time), ``mean_token_d{d}`` (sample, time, dim); the d = 3 clouds; the
        decorrelation (field, decor_size), if run."""
        cfg = self.config
        steps, w2_steps = _steps(cfg.model.L, cfg.records), _steps(cfg.model.L, cfg.w2_records)
        data: dict[str, tuple[tuple[str, ...], Any]] = {}
        coords = {"size": cfg.sizes, "time": [s * cfg.model.dt for s in steps], "step": ("time", steps),
                  "w2_time": [s * cfg.model.dt for s in w2_steps], "w2_step": ("w2_time", w2_steps),
                  "decor_size": cfg.decor_sizes}
        for d, tab in self.coupling.items():
            sample, w2_sample = f"sample_d{d}", f"w2_sample_d{d}"
            data[f"err2_d{d}"] = ((sample, "time", "size"), tab["err2"])
            data[f"energy_d{d}"] = ((sample, "time"), tab["energy"])
            data[f"mean_token_norm_d{d}"] = ((sample, "time"), tab["mean_token_norm"])
            data[f"mean_token_d{d}"] = ((sample, "time", f"dim_d{d}"), tab["mean_token"])
            if tab["w2"].size:
                data[f"w2_d{d}"] = ((w2_sample, "w2_time", "size"), tab["w2"])
                data[f"sliced_w2_d{d}"] = ((w2_sample, "w2_time", "size"), tab["sw2"])
        for k, v in self.clouds.items():
            data[f"cloud_{k}"] = (("token", "dim_d3"), v)
        if self.decorrelation is not None:
            data["decor_rho"] = (("field", "decor_size"), self.decorrelation["rho_per_field"])
            data["decor_se"] = (("field", "decor_size"), self.decorrelation["se_per_field"])
        return xr.Dataset(data, coords=coords)


# --------------------------------------------------------------------------- experiment


def _fits(cfg: ChaosConfig, coupling: dict, decor: Optional[dict], seed: int) -> dict:
    sizes = np.asarray(cfg.sizes, dtype=float)
    fits: dict = {"coupling": {}, "coupling_corrected": {}, "w2": {}, "w2_corrected": {}, "w2_t0": {}, "sliced_w2": {},
                  "r_d": {}}
    ref = 1 - sizes / cfg.model.N  # finite-reference factor of a subsample of the reference
    for d, tab in coupling.items():
        sup = tab["err2"].max(axis=1)  # (S, n_sizes): sup over recorded times
        fits["coupling"][d] = fit_power_law(sizes, sup, cfg.bootstrap, seed).to_dict()
        fits["coupling_corrected"][d] = fit_power_law(sizes, sup / ref, cfg.bootstrap, seed).to_dict()
        for name, law, text in (("r_d", rate_function, _rate_law(int(d))), ("sphere_rate", sphere_rate, _sphere_law(int(d)))):
            # local exponent of the law over the measured sizes (the log factors make it N-dependent)
            slope = -loglog_slope(sizes, law(int(d), sizes))[0]
            fits.setdefault(name, {})[d] = {"exponent": float(slope), "law": text}
        if tab["w2"].size and tab["w2"].shape[0] >= 2:
            fits["w2"][d] = fit_power_law(sizes, tab["w2"].max(axis=1), cfg.bootstrap, seed).to_dict()
            # the plan (N/N_ref)·identity + (1 − N/N_ref)·(optimal plan to the other tokens) gives
            # W₂²(μ^N, μ^{N_ref}) ≤ (1 − N/N_ref) W₂²(μ^N, rest), an equality to first order in the fluctuation
            fits["w2_corrected"][d] = fit_power_law(sizes, tab["w2"].max(axis=1) / ref, cfg.bootstrap, seed).to_dict()
            fits["w2_t0"][d] = fit_power_law(sizes, tab["w2"][:, 0], cfg.bootstrap, seed).to_dict()
            fits["sliced_w2"][d] = fit_power_law(sizes, tab["sw2"].max(axis=1), cfg.bootstrap, seed).to_dict()
    if decor is None:
        return fits
    rho, se = np.asarray(decor["rho"]), np.asarray(decor["se"])
    # every size enters, weighted by its SE (dropping unresolved sizes would bias the exponent low)
    fits["decorrelation"] = {**fit_power_law_weighted(cfg.decor_sizes, rho, se).to_dict(),
                             "sizes_used": list(cfg.decor_sizes)}
    return fits


def _rate_law(d: int) -> str:
    return "N^-1/2" if d < 4 else ("N^-1/2 log(1+N)" if d == 4 else f"N^-2/{d}")


def _sphere_law(d: int) -> str:
    return {2: "N^-1", 3: "log(1+N)/N"}.get(d, f"N^-2/{d - 1}")


#: the optional dependency of the study: (module, feature) for `require`
NEEDS = ("ot", "the chaos study (W₂ between token clouds)")


@validated
def run_chaos(
    cfg: ChaosConfig, progress: bool = False, store: Optional[Path | str] = None, scheduler: Optional[str] = None
) -> ChaosResult:
    """The three measurements of the module docstring. ``store``: folder of finished tasks (one per
    sample and dimension, one per decorrelation field and size), so a killed run resumes;
    ``scheduler``: as in [`run_tasks`][stochformer.tasks.run_tasks].

    Parameters
    ----------
    cfg : ChaosConfig
        A validated configuration.
    progress : bool, optional
        Show progress bars (on a terminal).
    store : str or pathlib.Path, optional
        A folder of finished tasks, so a killed run resumes.
    scheduler : str, optional
        Where the tasks run (as for ``run_tasks``).

    Returns
    -------
    ChaosResult
        The tables and fits.
    """
    cfg = as_config(cfg, ChaosConfig)
    require(*NEEDS)  # before any work
    env = setup(cfg)
    start = time.perf_counter()
    config = cfg.model_dump(mode="json")
    root_coupling, root_decor = child_seeds(cfg.model.seed, 2)
    dim_roots = child_seeds(root_coupling, max(cfg.dims) + 1)
    tasks = []
    for d in cfg.dims:
        for s, seed in enumerate(child_seeds(dim_roots[d], cfg.samples_for(d))):
            kw = dict(config=config, d=d, seed=seed, with_w2=s < cfg.w2_batch, keep_cloud=(d == 3 and s == 0))
            tasks.append(Task(f"coupling-d{d}-s{s}", coupling_task, kw))
    field_seeds = child_seeds(root_decor, cfg.decor_fields) if cfg.decorrelation else []
    for f, seed in enumerate(field_seeds):
        for n in cfg.decor_sizes:
            tasks.append(Task(f"decor-f{f}-n{n}", decorrelation_task, dict(config=config, n=n, seed=seed)))
    res = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="chaos")

    coupling, clouds = {}, {}
    for d in cfg.dims:
        rows = [res[f"coupling-d{d}-s{s}"] for s in range(cfg.samples_for(d))]
        w_rows = [r for r in rows if len(r["w2"])]
        coupling[str(d)] = {
            "err2": np.array([r["err2"] for r in rows]),
            "w2": np.array([r["w2"] for r in w_rows]) if w_rows else np.zeros((0, 0, 0)),
            "sw2": np.array([r["sw2"] for r in w_rows]) if w_rows else np.zeros((0, 0, 0)),
            "w2_method": "+".join(sorted({r["w2_method"] for r in w_rows})),
            "w2_warnings": [w for r in w_rows for w in r["w2_warnings"]],
            "energy": np.array([r["energy"] for r in rows]),
            "mean_token": np.array([r["mean_token"] for r in rows]),
            "mean_token_norm": np.array([r["mean_token_norm"] for r in rows]),
        }
        if d == 3:
            clouds = {"initial": np.asarray(rows[0]["cloud_initial"]), "final": np.asarray(rows[0]["cloud_final"])}
    decor = _decorrelation(cfg, res) if cfg.decorrelation else None
    fits = _fits(cfg, coupling, decor, child_seeds(cfg.model.seed, 3)[2] % (2**32))
    return ChaosResult(cfg, coupling, decor, fits, env.provenance(), time.perf_counter() - start, clouds)


def _decorrelation(cfg: ChaosConfig, res: dict) -> dict:
    """The decorrelation table from the finished tasks ``res``: per field and size, and averaged."""
    F = cfg.decor_fields
    rho = np.array([[res[f"decor-f{f}-n{n}"]["rho"] for n in cfg.decor_sizes] for f in range(F)])
    se = np.array([[res[f"decor-f{f}-n{n}"]["se"] for n in cfg.decor_sizes] for f in range(F)])
    return {
        "sizes": cfg.decor_sizes,
        "repeats": cfg.decor_repeats,
        "fields": F,
        "rho_per_field": rho,
        "se_per_field": se,
        # mean over fields of the conditional correlation; the fields' estimates are independent
        "rho": rho.mean(0),
        "se": np.sqrt((se**2).sum(0)) / F,
    }
