"""The sections of the report, one per claim of SPEC §6, in the order of the page.

Each section calls an experiment module's public ``run_xxx`` and its plotting functions, turns the
result into predicted-vs-measured rows (:class:`~stochformer.report.verdict.Comparison`) and
embedded figures, and declares its sizes for every profile. A section whose experiment module is
missing or broken reports itself as not available; the others still run.
"""

from __future__ import annotations

from typing import Any

from ..runtime import provenance, resolve_device
from .profiles import sizes
from .stages import Stage, StageContext, StageOutput, StageUnavailable, figure_png, lazy_model, register, require
from .verdict import Comparison


def _prov(cfg: Any) -> dict:
    return provenance(resolve_device(getattr(cfg, "device", "cpu")))


def not_available(what: str, module: str):
    """A ``run`` for a section whose experiment is not wired in yet: raises a clear error."""

    def run(cfg: Any, ctx: StageContext) -> StageOutput:
        raise StageUnavailable(f"{what} is not available yet (stochformer.{module} is not wired into the report)")

    return run


# ---------------------------------------------------------------------------------------------
# Interim sections built on what exists (kernel.rates, experiments.simulate); replaced by the
# experiment modules' own run functions as they land.
# ---------------------------------------------------------------------------------------------

from pydantic import Field  # noqa: E402

from ..config import RunConfig  # noqa: E402


class ClustersConfig(RunConfig):
    """SPEC §6.1: tokens on S^{d−1} with no attention, for each of ``activations``."""

    activations: list[str] = Field(default_factory=lambda: ["relu", "tanh"])


def _simulate_task(config: dict) -> dict:
    """One ``simulate`` run as a task: the summary and the final Gram statistics (JSON-able)."""
    import torch

    from ..experiments.simulate import simulate

    res = simulate(RunConfig.model_validate(config))
    X = torch.from_numpy(res.trajectory.final)
    G = X @ X.transpose(-1, -2)
    off = ~torch.eye(X.shape[-2], dtype=torch.bool)
    cos2 = (G**2)[:, off].mean(-1)  # mean of cos² over pairs i ≠ j, per sample
    return {"summary": res.summary(), "mean_cos2": cos2.numpy(), "elapsed_s": res.elapsed_s}


def _run_clusters(cfg: ClustersConfig, ctx: StageContext) -> StageOutput:
    import math

    from ..plotting import plot_summary
    from ..tasks import Task, run_tasks

    base = RunConfig.model_validate(cfg.model_dump(exclude={"activations"})).model_dump(mode="json")
    tasks = [Task(a, _simulate_task, {"config": {**base, "activation": a}}) for a in cfg.activations]
    res = run_tasks(tasks, store=ctx.workdir, scheduler=ctx.scheduler, progress=ctx.progress, desc="clusters")
    rows, figs = [], []
    for a in cfg.activations:
        c2 = res[a]["mean_cos2"]
        mean = sum(c2) / len(c2)
        se = (sum((x - mean) ** 2 for x in c2) / max(len(c2) - 1, 1) / len(c2)) ** 0.5
        rows.append(Comparison.from_mean_se(f"{a}: mean cos² at layer L (uniform: 1/d)", 1 / cfg.d, mean, se, rule="above",
                                            note="clusters ⇒ well above the uniform value 1/d"))
        figs.append(figure_png(plot_summary(res[a]["summary"], f"{a}: N={cfg.N}, d={cfg.d}, L={cfg.L}"), a, f"{a}: E_β and pairwise cosines"))
    return StageOutput({"runs": res}, rows, figs, _prov(cfg), {"seed": cfg.seed})


register(Stage(
    name="clusters",
    title="Clusters on S³",
    spec="SPEC §6.1",
    claim="Without attention, the MLP noise alone makes near-uniform tokens on S³ form clusters; with tanh "
          "(an odd field) they end in two antipodal clusters.",
    model=lambda: ClustersConfig,
    sizes=sizes(
        tiny={"N": 16, "d": 4, "L": 100, "T": 20, "m": 256, "attention": False, "batch": 2},
        quick={"N": 64, "d": 4, "L": 500, "T": 20, "m": 1024, "attention": False, "batch": 4},
        full={"N": 64, "d": 4, "L": 2000, "T": 20, "m": 2048, "attention": False, "batch": 8},
    ),
    run=_run_clusters,
))


class RatesTableConfig(RunConfig):
    """The paper's table (Appendix C), computed part: activations × d × σ."""

    activations: list[str] = Field(default_factory=lambda: ["relu", "sigmoid", "tanh", "silu"])
    dims: list[int] = Field(default_factory=lambda: [5, 64, 128])
    sigmas: list[float] = Field(default_factory=lambda: [0.0, 0.1])


def _run_rates_table(cfg: RatesTableConfig, ctx: StageContext) -> StageOutput:
    from ..kernel import NoiseKernel, rates

    rows, numbers = [], []
    for act in cfg.activations:
        for d in cfg.dims:
            for s in cfg.sigmas:
                r = rates(NoiseKernel(act, d, s, s), beta=cfg.beta)
                numbers.append({"activation": act, "d": d, "sigma": s, **r.to_dict()})
                rows.append([act, d, s, r.kappa, r.kappa_prime, r.lambda_1, r.lambda_bar])
    table = {"title": "κ(1), κ'(1), λ₁, λ̄ (SPEC §5), σ_U = σ_W = σ",
             "columns": ["activation", "d", "σ", "κ(1)", "κ'(1)", "λ₁", "λ̄"], "rows": rows}
    return StageOutput({"rates": numbers}, [], [], _prov(cfg), {"seed": cfg.seed}, tables=[table])


register(Stage(
    name="table",
    title="The paper's table: κ(1), κ'(1), λ₁, λ̄",
    spec="SPEC §6.3, §5",
    claim="The kernel constants κ(1), κ'(1) and the rates λ₁ (Lyapunov exponent) and λ̄ (first-moment rate) "
          "of the paper's Appendix C follow from the activation, d and σ, and match what simulations measure.",
    model=lambda: RatesTableConfig,
    sizes=sizes(tiny={"dims": [5]}, quick={}, full={}),
    run=_run_rates_table,
))
