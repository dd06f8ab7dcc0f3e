"""``simulate``: evolve tokens through the deep transformer or the limit SDE and record the
pairwise statistics (mean/min cosine, E_β) per layer, with their standard errors over samples."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Union

import numpy as np
import torch
import xarray as xr

from ..config.build import GivenModels, Setup, initial_tokens, make_attention, make_model, setup
from ..config import RunConfig, as_config
from ..measure.diagnostics import STATISTICS
from ..model.activations import Activation, activation_name
from ..model.sde import LimitSDE
from ..model.transformer import Transformer
from ..model.attention import DEFAULT_BLOCK, query_chunk
from ..io.results import Result
from ..integrate import ModelSource, SaveAt, solve
from ..measure.stats import mean_and_se
from ..core.progress import ProgressMeter
from ..core.validation import blamed_on, validated


@dataclass(repr=False)
class SimulationResult(Result):
    """What [`run_simulate`][stochformer.experiments.simulate.run_simulate] returns: the config, the dataset of [`stochformer.solve`][stochformer.solve]
    (statistics ``(sample, time)``, token paths ``X``, ``X_final``) and the run's provenance.

    Attributes
    ----------
    config : RunConfig
        The configuration run.
    data : xarray.Dataset
        The dataset of ``solve``.
    provenance : dict
        Versions, platform and device.
    elapsed_s : float
        The run time in seconds.
    meta : dict
        Further record entries.
    """

    command: ClassVar[str] = "simulate"
    config: RunConfig
    data: xr.Dataset
    provenance: dict
    elapsed_s: float
    meta: dict = field(default_factory=dict)

    def _dataset(self) -> xr.Dataset:
        ds = self.data.copy()
        for name in STATISTICS:
            mean, se = mean_and_se(torch.from_numpy(ds[name].values), axis=0)
            ds[f"{name}_mean"], ds[f"{name}_se"] = ("time", np.asarray(mean)), ("time", np.asarray(se))
        return ds

    def summary(self) -> dict:
        """Per recorded layer: sample mean and SE of mean cosine, E_β and min cosine.

        Returns
        -------
        dict
            ``layers`` (the recorded steps) and, per statistic ``NAME``, ``NAME`` and ``NAME_se`` (per layer).
        """
        ds = self._dataset()
        out: dict = {"layers": ds["step"].values}
        for name in STATISTICS:
            out[name], out[f"{name}_se"] = ds[f"{name}_mean"].values, ds[f"{name}_se"].values
        return out

    def to_dict(self) -> dict:
        return self.summary()


@validated
def run_simulate(cfg: RunConfig, progress: bool = False, activation: Optional[Activation] = None,
                 model: Optional[ModelSource] = None) -> SimulationResult:
    """Run ``cfg.batch`` independent samples of ``cfg.dynamics`` for L layers (or SDE steps).

    The transformer of SPEC §1 or the limit SDE of SPEC §3, built from the config
    ([`make_model`][stochformer.config.build.make_model]) and stepped by
    [`solve`][stochformer.integrate.solve] from ``cfg.init`` tokens.

    Parameters
    ----------
    cfg : RunConfig or dict
        The run ([`RunConfig`][stochformer.config.RunConfig]); a dict is validated first.
    progress : bool, optional
        Show a progress bar.
    activation : callable, optional
        Any elementwise φ (torch → torch) used instead of ``cfg.activation``; its kernel κ comes
        from Gauss–Hermite quadrature.
    model : Model or callable, optional
        A model built by hand, stepped instead of the one ``cfg`` describes (a ``Transformer`` for
        ``dynamics = "transformer"``, a ``LimitSDE`` for ``"sde"``, or any
        [`Model`][stochformer.integrate.Model], built for ``cfg.d``), or a factory
        ``model(cfg) -> model`` called once with ``cfg``: checked before any work
        ([`GivenModels`][stochformer.config.build.GivenModels]). ``cfg`` still gives the tokens, T, L,
        seed, device, dtype and what is recorded; ``result.meta["model"]`` records the model. The
        same object reused with the same seed gives the same numbers; ``model = make_model(cfg)`` (or
        ``model = make_model``) gives those of the run without it. Not together with ``activation``.

    Returns
    -------
    SimulationResult
        The config, the dataset (statistics ``(sample, time)``, token paths ``X``, ``X_final``) and
        the run's provenance ([`SimulationResult`][stochformer.experiments.simulate.SimulationResult]);
        ``result.save(folder)`` writes it.

    Raises
    ------
    ConfigError
        A field out of range, naming the field and its valid range; a ``model`` built for another ``d``.
    TypeError
        A ``model`` that is not the config's kind of model (or a factory that builds none), naming
        ``model`` and what is accepted.

    Examples
    --------
    >>> from stochformer.config import RunConfig
    >>> from stochformer.experiments.simulate import run_simulate
    >>> result = run_simulate(RunConfig(N=4, d=3, L=10, m=32, batch=2, seed=0))
    >>> dict(result.data.sizes)
    {'sample': 2, 'time': 11, 'token': 4, 'dim': 3}
    """
    cfg = as_config(cfg)
    if model is not None and activation is not None:
        raise ValueError("activation: give the activation inside the model (its noise source), not beside a model")
    given = GivenModels.check(model, [cfg], "simulate")
    env = setup(cfg)
    gen = env.generator()
    start = time.perf_counter()
    X0 = initial_tokens(cfg.init, cfg.batch, cfg.N, cfg.d, gen, env.dtype, env.device)
    # many tokens: attention and statistics in blocks of DEFAULT_BLOCK entries, never an (N, N) matrix
    block = DEFAULT_BLOCK if cfg.N * cfg.N > DEFAULT_BLOCK else None
    stepped = given.model(cfg, "run", lambda: _model(cfg, env, block, activation))
    save = SaveAt(every=cfg.record_every, tokens_every=cfg.path_stride, energy_beta=cfg.energy_beta, block=block)
    with blamed_on(cfg):
        ds = solve(stepped, X0, cfg.T, cfg.L, save, generator=gen, progress=ProgressMeter(cfg.dynamics) if progress else None,
                   capture=cfg.capture)
    ds.attrs["seed"] = cfg.seed
    meta: dict = {} if activation is None else {"activation_callable": activation_name(activation)}
    meta.update(given.meta())
    meta["custom_parts"] = json.loads(ds.attrs["custom_parts"])
    return SimulationResult(cfg, ds, env.provenance(), time.perf_counter() - start, meta)


def _model(cfg: RunConfig, env: Setup, block: Optional[int], activation: Optional[Activation]) -> Union[Transformer, LimitSDE]:
    """The model of ``cfg`` as ``run_simulate`` builds it (chunked attention when ``block`` is set)."""
    attention = make_attention(cfg, env.dtype, env.device, chunk=query_chunk(cfg.N) if block else None)
    return make_model(cfg, env.dtype, env.device, attention=attention, activation=activation)
