"""The config layer's only bridge to the library: from a validated
[`RunConfig`][stochformer.config.RunConfig] to the objects [`stochformer.solve`][stochformer.solve] takes — the run's
[`Setup`][stochformer.config.build.Setup] (device, dtype, generators: [`setup`][stochformer.config.build.setup], once per
run), initial tokens, attention, noise source, and the model (transformer or limit SDE); and what a run
does with ``model=`` (a model, or a factory building one from each run's config, given instead of the
config's own: [`ModelSource`][stochformer.integrate.ModelSource]), in one place: checked before any
work ([`GivenModels.check`][stochformer.config.build.GivenModels.check],
[`check_model`][stochformer.config.build.check_model]), resolved per run
([`resolve_model`][stochformer.config.build.resolve_model]) and recorded
([`model_record`][stochformer.config.build.model_record])."""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Sequence, Union, cast

import torch

from ..core import sphere
from ..io.tokens import load_tokens
from . import ATTENTION_METHODS, NOISE_METHODS, ConfigError, ExperimentConfig, InitConfig, RunConfig, make_part
from ..model.activations import ActivationLike
from ..model.attention import DEFAULT_BLOCK, Attention, RandomBatchAttention, SoftmaxAttention, query_chunk
from ..model.attention_variants import (
    ATTENTION_KINDS,
    AveragedAttention,
    L2Attention,
    MultiHeadAttention,
    ResampledAttention,
    SinkhornAttention,
    UnnormalisedAttention,
)
from ..model.grouped import GroupedAttention, JointField
from ..model.kernel import NoiseKernel
from ..model.noise import ExactField, NoiseSource, RandomFeatureField, RandomMLP
from ..model.rng import resolve_backend
from ..model.sde import INTEGRATORS, LimitSDE
from ..model.transformer import Transformer
from ..core.runtime import DTYPES, child_seeds, make_generator, named_seed, provenance, resolve_device
from ..core.validation import callable_record, part_name

if TYPE_CHECKING:  # `integrate` loads xarray, which `rates` never needs
    from ..integrate import Model, ModelSource


@dataclass(frozen=True)
class Setup:
    """What a run resolves once from its config: the torch ``device``, the ``dtype`` of its tensors
    and its root ``seed``, from which it hands out generators on that device and derived seeds
    (the same streams as [`make_generator`][stochformer.core.runtime.make_generator],
    [`child_seeds`][stochformer.core.runtime.child_seeds] and [`named_seed`][stochformer.core.runtime.named_seed]:
    a run that takes its generators from here draws bit for bit what it drew before).

    Built by [`setup`][stochformer.config.build.setup]; frozen and picklable, so a run passes one
    down to every measurement it makes.

    Parameters
    ----------
    device : torch.device
        Where the run's tensors live.
    dtype : torch.dtype
        Their dtype.
    seed : int
        The run's root seed.
    """

    device: torch.device
    dtype: torch.dtype
    seed: int

    def generator(self, seed: Optional[int] = None) -> torch.Generator:
        """A generator on ``device`` seeded with ``seed`` (default: the run's seed).

        Parameters
        ----------
        seed : int, optional
            The seed (default: the run's).

        Returns
        -------
        torch.Generator
            A generator on ``device``.
        """
        return make_generator(self.seed if seed is None else seed, self.device)

    def seeds(self, n: int, seed: Optional[int] = None) -> list[int]:
        """``n`` independent seeds derived from ``seed`` (default: the run's seed), by ``child_seeds``.

        Parameters
        ----------
        n : int
            How many.
        seed : int, optional
            The parent seed (default: the run's).

        Returns
        -------
        list of int
            Independent seeds.
        """
        return child_seeds(self.seed if seed is None else seed, n)

    def generators(self, n: int, seed: Optional[int] = None) -> list[torch.Generator]:
        """``n`` generators on ``device``, one per seed of [`seeds`][stochformer.config.build.Setup.seeds].

        Parameters
        ----------
        n : int
            How many.
        seed : int, optional
            The parent seed (default: the run's).

        Returns
        -------
        list of torch.Generator
            Generators on ``device``.
        """
        return [make_generator(s, self.device) for s in self.seeds(n, seed)]

    def named_seed(self, name: str) -> int:
        """The seed of the run's part ``name`` (``named_seed(seed, name)``).

        Parameters
        ----------
        name : str
            The part's name.

        Returns
        -------
        int
            Its seed.
        """
        return named_seed(self.seed, name)

    def provenance(self) -> dict:
        """Versions, platform and this device, as every result records them (`runtime.provenance`).

        Returns
        -------
        dict
            Versions, platform and device.
        """
        return provenance(self.device)


def setup(cfg: Union[RunConfig, ExperimentConfig]) -> Setup:
    """The [`Setup`][stochformer.config.build.Setup] of a run: ``device`` (``cpu``, ``cuda``, ``cuda:i``;
    an error naming ``device`` if CUDA is absent), ``dtype`` and ``seed`` of ``cfg`` (of
    ``cfg.model`` for an experiment's config), resolved once.

    Parameters
    ----------
    cfg : RunConfig or ExperimentConfig
        A validated configuration.

    Returns
    -------
    Setup
        Device, dtype and seed.
    """
    run = cfg.model if isinstance(cfg, ExperimentConfig) else cfg
    if not isinstance(run, RunConfig):
        raise TypeError(f"cfg: setup takes a RunConfig or an ExperimentConfig (got {type(cfg).__name__})")
    return Setup(resolve_device(run.device), DTYPES[run.dtype], int(run.seed))


#: the stochformer model of each ``dynamics``: a given model of the other one is refused
MODEL_CLASSES: dict[str, type[Union[Transformer, LimitSDE]]] = {"transformer": Transformer, "sde": LimitSDE}

#: the RunConfig fields that say how a model is run (tokens, horizon, depth, samples, seed,
#: numerics, what is recorded), not what the model is: runs whose configs differ only in these can
#: share one model object
RUN_FIELDS = ("N", "L", "T", "batch", "seed", "dtype", "device", "energy_beta", "record_every", "path_stride", "init")


def is_model(obj: Any) -> bool:
    """Whether ``obj`` is a model ([`Model`][stochformer.integrate.Model]: an object with ``step`` and
    ``reset`` methods) rather than a factory building one.

    Parameters
    ----------
    obj : Any
        A model, a factory or anything else.

    Returns
    -------
    bool
        True for a model (not a class).
    """
    return not isinstance(obj, type) and callable(getattr(obj, "step", None)) and callable(getattr(obj, "reset", None))


def check_model(model: Any, cfg: RunConfig, prefix: str = "", built_by: Optional[str] = None) -> Model:
    """A model given to a run instead of the one its config builds, checked before any work: a
    [`Model`][stochformer.integrate.Model] (``step`` and ``reset``), and where it is one of
    stochformer's, a [`Transformer`][stochformer.model.transformer.Transformer] for ``dynamics =
    "transformer"``, a [`LimitSDE`][stochformer.model.sde.LimitSDE] for ``"sde"`` (else ``TypeError``
    naming ``model`` and what is accepted); its attention and noise source, where they state a
    dimension, built for the config's ``d`` (else ``ConfigError`` naming ``d``, as ``model.d`` with
    ``prefix = "model."`` for an experiment's config).

    Parameters
    ----------
    model : Any
        The model given by hand, or built by a factory.
    cfg : RunConfig
        A validated configuration: the run's.
    prefix : str, optional
        Prepended to the field's name in messages.
    built_by : str, optional
        The factory that built ``model`` (named in messages).

    Returns
    -------
    Model
        ``model``, checked.
    """
    accepted = MODEL_CLASSES[cfg.dynamics]
    other_kind = isinstance(model, tuple(MODEL_CLASSES.values())) and not isinstance(model, accepted)
    if other_kind or not is_model(model):
        others = " or ".join(f"a {c.__name__} for dynamics = {k!r}" for k, c in MODEL_CLASSES.items())
        head = "must be" if built_by is None else f"the factory {built_by} must build"
        raise TypeError(f"model: {head} a {accepted.__name__} (the config has dynamics = {cfg.dynamics!r}; "
                        f"accepted: {others}, or a model of one's own with step(X, dt, draws) and reset(batch, d, "
                        f"generator, dtype, device)), got {type(model).__module__}.{type(model).__qualname__}")
    whose = "the given model's" if built_by is None else f"the model {built_by} built:"
    for part in ("attention", "noise"):
        dim = getattr(getattr(model, part, None), "d", None)
        if isinstance(dim, int) and not isinstance(dim, bool) and dim != cfg.d:
            raise ConfigError(f"{prefix}d: {whose} {part} ({type(getattr(model, part)).__name__}) is built for "
                              f"d = {dim}, the config has d = {cfg.d}")
    return model


def resolve_model(source: Optional[ModelSource], cfg: RunConfig, env: Optional[Setup] = None,
                  prefix: str = "") -> Model:
    """The model of one run: the config's own ([`make_model`][stochformer.config.build.make_model] on
    ``env``'s dtype and device) without ``source``; the model ``source`` itself; or what the factory
    ``source(cfg)`` builds. Either is checked by [`check_model`][stochformer.config.build.check_model]
    against ``cfg``; a factory that raises is one error naming ``model`` and the factory.

    Parameters
    ----------
    source : Model or callable or None
        ``model=`` of the run ([`ModelSource`][stochformer.integrate.ModelSource]).
    cfg : RunConfig
        A validated configuration: the run's.
    env : Setup, optional
        The run's dtype and device, for the config's own model (default: ``setup(cfg)``).
    prefix : str, optional
        Prepended to the field's name in messages.

    Returns
    -------
    Model
        The run's model, checked.
    """
    if source is None:
        env = env or setup(cfg)
        return make_model(cfg, env.dtype, env.device)
    if is_model(source) or not callable(source):
        return check_model(source, cfg, prefix)
    name = part_name(source)
    try:
        built = source(cfg)
    except Exception as exc:
        kind = TypeError if isinstance(exc, TypeError) else ValueError
        raise kind(f"model: the factory {name} failed on the run's config ({type(exc).__name__}: {exc})") from exc
    return check_model(built, cfg, prefix, built_by=name)


def model_record(model: Any) -> dict:
    """What a result records of a model given by hand: ``given``, its ``description`` (class by
    qualified name and fields; callables by qualified name and parameters, or an ``"unrecorded"`` mark
    where they cannot be read: [`describe`][stochformer.integrate.describe]), and ``custom_parts``,
    where it holds parts not defined by stochformer ([`custom_parts`][stochformer.integrate.custom_parts]).
    The config's own model fields then describe the config, not the model that ran.

    Parameters
    ----------
    model : Any
        The model given by hand.

    Returns
    -------
    dict
        ``given``, ``description`` and ``custom_parts``.
    """
    from ..integrate import custom_parts, describe  # here: integrate loads xarray, which `rates` never needs

    return {"given": True, "description": describe(model), "custom_parts": custom_parts(model)}


@dataclass
class GivenModels:
    """``model=`` of an experiment (a model, or a factory ``factory(cfg) -> model``; None: the
    configs' own models), checked once before any work by
    [`check`][stochformer.config.build.GivenModels.check], then asked for each run's model by
    [`model`][stochformer.config.build.GivenModels.model], which records what ran.

    Attributes
    ----------
    source : Model or callable or None
        ``model=`` ([`ModelSource`][stochformer.integrate.ModelSource]).
    prefix : str
        Prepended to the field's name in messages (``model.`` for an experiment's config).
    runs : dict
        Run label → the [`model_record`][stochformer.config.build.model_record] of the model a factory
        built for it.
    """

    source: Optional[ModelSource] = None
    prefix: str = ""
    runs: dict[str, dict] = field(default_factory=dict)
    _first: Optional[tuple[RunConfig, Model]] = field(default=None, init=False, repr=False)

    @classmethod
    def check(cls, source: Optional[ModelSource], cfgs: Sequence[RunConfig], what: str, scheduler: Any = None,
              store: Any = None, prefix: str = "") -> GivenModels:
        """``model=`` checked before any work against the configs of every run of ``what``:

        * a model object runs every run, so the configs must agree on every field but the
          `RUN_FIELDS` (else ``ValueError`` naming ``model`` and the fields that differ: give a
          factory), and it is checked against each by [`check_model`][stochformer.config.build.check_model];
        * a factory is called now on the first config and what it builds is checked (that model runs
          the first run where it runs in this process); each run calls it again on its own config;
        * with a ``scheduler`` other than serial the runs go to other processes: ``source`` must
          pickle (a module-level function or class, a ``functools.partial`` of one, a model object;
          not a lambda or a local function), else ``ValueError`` naming ``model``;
        * a ``store`` keys each task by its config and code, which do not hold a model given by hand:
          refused (``ValueError`` naming ``model``; give one's own parts by import string in the
          config for a resumable run).

        Parameters
        ----------
        source : Model or callable or None
            ``model=`` ([`ModelSource`][stochformer.integrate.ModelSource]).
        cfgs : sequence of RunConfig
            The configs of the experiment's runs, the first first.
        what : str
            The experiment (named in messages).
        scheduler : Any, optional
            The experiment's ``scheduler``.
        store : Any, optional
            The experiment's ``store``.
        prefix : str, optional
            Prepended to the field's name in messages.

        Returns
        -------
        GivenModels
            The checked source.
        """
        given = cls(source, prefix)
        if source is None:
            return given
        if store is not None:
            raise ValueError(f"model: {what} with a store keys each task by its config, which does not hold a model given "
                             "by hand; give the parts by import string in the config (activation, attention_kind, noise) "
                             "for a resumable run, or run without store")
        if is_model(source):
            dumps = [c.model_dump(mode="json", exclude=set(RUN_FIELDS)) for c in cfgs]
            differ = sorted({k for d in dumps[1:] for k in d if d[k] != dumps[0][k]})
            if differ:
                raise ValueError(f"model: {what} runs models of different configs (they differ in {', '.join(differ)}), "
                                 "and one model object would run them all; give a factory instead, "
                                 "model=lambda cfg: ..., called with each run's config")
            for c in cfgs:
                check_model(source, c, prefix)
        elif callable(source):
            given._first = (cfgs[0], resolve_model(source, cfgs[0], prefix=prefix))
        else:
            check_model(source, cfgs[0], prefix)  # the TypeError naming what is accepted
        if scheduler is not None and not (isinstance(scheduler, str) and scheduler == "serial"):
            try:
                pickle.dumps(source)
            except Exception as exc:  # the message of a PicklingError holds a memory address
                raise ValueError(f"model: runs on scheduler {scheduler!r} in other processes, so the model or factory "
                                 f"must pickle, and {part_name(source)} does not ({type(exc).__name__}); define the factory "
                                 "at module level (a lambda or a local function does not pickle), or run with "
                                 "scheduler='serial'") from None
        return given

    def model(self, cfg: RunConfig, label: str, default: Callable[[], Model]) -> Model:
        """The model of the run ``label`` of config ``cfg``: ``default()`` (the config's own) without a
        source; else [`get`][stochformer.config.build.GivenModels.get].

        Parameters
        ----------
        cfg : RunConfig
            The run's config.
        label : str
            The run's name in the record.
        default : callable
            Builds the config's own model.

        Returns
        -------
        Model
            The run's model.
        """
        given = self.get(cfg, label)
        return default() if given is None else given

    def get(self, cfg: RunConfig, label: str) -> Optional[Model]:
        """The given model of the run ``label`` of config ``cfg``: None without a source; the model
        object; or what the factory builds for ``cfg`` (checked, and recorded under ``label``).

        Parameters
        ----------
        cfg : RunConfig
            The run's config.
        label : str
            The run's name in the record.

        Returns
        -------
        Model or None
            The run's given model.
        """
        if self.source is None:
            return None
        if is_model(self.source):
            return cast("Model", self.source)
        if self._first is not None and self._first[0] == cfg:
            model, self._first = self._first[1], None
        else:
            model = resolve_model(self.source, cfg, prefix=self.prefix)
        self.runs[label] = model_record(model)
        return model

    def task_kwargs(self) -> dict:
        """The keyword a run's task takes: ``{"model": source}``, or none without a source (so that a
        task's key, and what a store holds, are those of the run without ``model=``).

        Returns
        -------
        dict
            ``{"model": source}`` or ``{}``.
        """
        return {} if self.source is None else {"model": self.source}

    def add(self, label: str, record: Optional[dict]) -> None:
        """Record the model a task built for the run ``label`` (its ``model_record``; None: nothing).

        Parameters
        ----------
        label : str
            The run's name in the record.
        record : dict or None
            The task's ``model_record``.
        """
        if record is not None and self.source is not None and not is_model(self.source):
            self.runs[label] = record

    def meta(self) -> dict:
        """What the result records: ``{}`` without a source; else ``{"model": ...}``: a model object's
        [`model_record`][stochformer.config.build.model_record]; for a factory ``given``, ``factory`` (its
        qualified name and parameters, or an ``"unrecorded"`` mark for a closure's captured values),
        ``runs`` (per run, the record of the model it built) and ``custom_parts`` (the factory's where it
        is not stochformer's, and those of the models it built).

        Returns
        -------
        dict
            ``{}`` or ``{"model": record}``.
        """
        if self.source is None:
            return {}
        if is_model(self.source):
            return {"model": model_record(self.source)}
        from ..integrate import custom_parts

        parts = custom_parts(self.source, "factory") + sorted({p for r in self.runs.values() for p in r["custom_parts"]})
        return {"model": {"given": True, "factory": callable_record(self.source), "custom_parts": parts,
                          "runs": {k: {"description": r["description"], "custom_parts": r["custom_parts"]}
                                   for k, r in self.runs.items()}}}


def task_model(model: Optional[ModelSource], cfg: RunConfig, env: Optional[Setup] = None) -> tuple[Optional[Model], dict]:
    """In a task of an experiment (another process, perhaps): the run's given model (None without
    ``model``: the config's own then runs) by [`resolve_model`][stochformer.config.build.resolve_model],
    and what the task returns of it for [`GivenModels.add`][stochformer.config.build.GivenModels.add]
    (``{"model": model_record}``, ``{}`` without ``model``).

    Parameters
    ----------
    model : Model or callable or None
        The task's ``model`` keyword.
    cfg : RunConfig
        The run's config.
    env : Setup, optional
        The run's dtype and device.

    Returns
    -------
    tuple
        The model (or None) and the entries to return.
    """
    if model is None:
        return None, {}
    built = resolve_model(model, cfg, env)
    return built, {"model": model_record(built)}


def initial_tokens(
    init: InitConfig, batch: int, N: int, d: int, generator: torch.Generator, dtype=torch.float64, device="cpu"
) -> torch.Tensor:
    """Initial tokens X₀: (batch, N, d), unit rows, as described by ``init``.

    Parameters
    ----------
    init : InitConfig
        The initial law (``uniform``, ``cluster``, ``pair`` or a file).
    batch : int
        Samples.
    N : int
        Tokens per sample.
    d : int
        Token dimension.
    generator : torch.Generator
        The run's generator.
    dtype : torch.dtype, optional
        The tensors' dtype.
    device : str or torch.device, optional
        Their device.

    Returns
    -------
    torch.Tensor, shape (batch, N, d)
        Unit rows.
    """
    kw = dict(generator=generator, dtype=dtype, device=device)
    if init.kind == "uniform":
        return sphere.uniform(batch, N, d, **kw)
    if init.kind == "cluster":
        return sphere.cluster(batch, N, d, init.spread, init.center, **kw)
    if init.kind == "pair":
        return sphere.pair(batch, d, init.cosine, **kw)
    return load_tokens(init.path, batch, N, d, dtype=dtype, device=device)


#: the config fields the noise kernel reads besides the activation, each by its NoiseKernel argument
KERNEL_FIELDS = {"d": "d", "sigma_U": "sigma_U", "sigma_W": "sigma_W", "noise_scale": "scale", "gain": "gain"}


def make_kernel(cfg: RunConfig, activation: Optional[ActivationLike] = None) -> NoiseKernel:
    """κ for the config's activation (or the callable ``activation``) and ``KERNEL_FIELDS``; for a
    noise source of one's own (an import string), the kernel its ``noise_kernel(d)`` states.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    activation : str or callable, optional
        φ replacing the config's.

    Returns
    -------
    NoiseKernel
        κ.
    """
    if ":" in cfg.noise:
        part = make_part(cfg.noise, cfg.noise_args, "noise", NOISE_METHODS)
        if not callable(getattr(part, "noise_kernel", None)):
            raise ValueError(f"noise: {cfg.noise!r} has no noise_kernel(d), and this needs its kernel κ (the limit "
                             "SDE's drift, or a prediction from the theory)")
        return part.noise_kernel(cfg.d)
    return NoiseKernel(activation or cfg.activation, **{arg: getattr(cfg, name) for name, arg in KERNEL_FIELDS.items()})


def make_attention(
    cfg: RunConfig, dtype=torch.float64, device="cpu", chunk: Optional[int] = None, sdpa: bool = False
) -> Optional[Attention]:
    """The config's attention (None when ``attention = false``); an ``attention_kind`` other than
    softmax is built by [`make_variant`][stochformer.config.build.make_variant] (dense; ``chunk`` and ``sdpa`` apply to softmax).

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    dtype : torch.dtype, optional
        The tensors' dtype.
    device : str or torch.device, optional
        Their device.
    chunk : int, optional
        Query rows per chunk (softmax).
    sdpa : bool, optional
        Fused attention (softmax).

    Returns
    -------
    Attention or None
        The attention.
    """
    if not cfg.attention:
        return None
    if ":" in cfg.attention_kind:
        return make_part(cfg.attention_kind, cfg.attention_args, "attention_kind", ATTENTION_METHODS)
    if cfg.attention_kind != "softmax":
        return make_variant(cfg, dtype, device)
    exact = SoftmaxAttention.from_matrices(cfg.d, cfg.beta, cfg.gamma_value, cfg.Q, cfg.K, cfg.V, dtype, device, chunk, sdpa)
    if cfg.attention_batch is None:
        return exact
    return RandomBatchAttention(exact, cfg.attention_batch)  # permutations from the run's attention stream


def _matrix(cfg: RunConfig, name: str, default: torch.Tensor) -> torch.Tensor:
    value = getattr(cfg, name)
    return default if value is None else torch.tensor(value, dtype=default.dtype, device=default.device)


def make_variant(cfg: RunConfig, dtype=torch.float64, device="cpu") -> Attention:
    """The attention of ``cfg.attention_kind`` (any kind but ``softmax``), from β, γ, Q, K, V and
    the variant's own fields. Defaults: Q = K = √β I (L²: √(β/2) I, so that on the sphere it is
    softmax(β⟨x, y⟩)), V = γ I; explicit Q, K, V replace them (then a missing Q or K is I).

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    dtype : torch.dtype, optional
        The tensors' dtype.
    device : str or torch.device, optional
        Their device.

    Returns
    -------
    Attention
        The variant's attention.
    """
    kind = cfg.attention_kind
    eye = torch.eye(cfg.d, dtype=dtype, device=device)
    gamma = cfg.gamma_value
    if kind == "resampled":
        return ResampledAttention(cfg.d, cfg.beta, gamma, cfg.attention_std)  # Q, K, V from the run's attention stream
    if kind == "averaged":
        return AveragedAttention.from_law(cfg.d, cfg.beta, gamma, cfg.attention_std, cfg.attention_draws,
                                          cfg.attention_seed, dtype, device)
    # as for the softmax Attention: β applies when neither Q nor K is given, else the missing one is I
    qk = 1.0 if (cfg.Q is not None or cfg.K is not None) else math.sqrt(cfg.beta / 2 if kind == "l2" else cfg.beta)
    Q, K, V = _matrix(cfg, "Q", qk * eye), _matrix(cfg, "K", qk * eye), _matrix(cfg, "V", gamma * eye)
    if kind == "multihead":
        return MultiHeadAttention.split(Q, K, V, cfg.heads)
    if kind == "l2":
        return L2Attention(Q, K, V)
    if kind == "usa":
        return UnnormalisedAttention(Q.T @ K, V)
    if kind == "sinkhorn":
        return SinkhornAttention(Q.T @ K, V, cfg.sinkhorn_iters, cfg.sinkhorn_tol)
    raise ValueError(f"attention_kind: {kind!r} has no variant; valid: {', '.join(ATTENTION_KINDS)}")


#: N from which one SDE step with a random-feature field of width 1024 costs at most half the step
#: with the exact field (benchmarks/bench_sde.py, docs/benchmarks.md "Limit SDE"); for width M the
#: crossover is RF_CROSSOVER_N · M/1024 (an empirical law fitted to that table).
RF_CROSSOVER_N = 92.0


def noise_kind(cfg: RunConfig) -> str:
    """The resolved noise source name: ``auto`` → mlp_gaussian for the transformer; for the SDE the
    exact field below the crossover N*(features) = RF_CROSSOVER_N · features/1024, random
    features (of width ``features``) from it on.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.

    Returns
    -------
    str
        The noise source's name.
    """
    if cfg.noise != "auto":
        return cfg.noise
    if cfg.dynamics == "transformer":
        return "mlp_gaussian" if cfg.weight_law == "gaussian" else "mlp"
    return "exact" if cfg.N < RF_CROSSOVER_N * cfg.features / 1024 else "random_features"


def make_noise(cfg: RunConfig, activation: Optional[ActivationLike] = None, token_chunk: Optional[int] = None) -> Optional[NoiseSource]:
    """The noise source of ``cfg`` (None without MLP); ``activation``: a callable replacing cfg's.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    activation : str or callable, optional
        φ replacing the config's.
    token_chunk : int, optional
        Tokens per chunk of a random-feature field.

    Returns
    -------
    NoiseSource or None
        The noise source.
    """
    if not cfg.mlp or cfg.noise_scale == 0:
        return None
    kind = noise_kind(cfg)
    if ":" in kind:
        return make_part(kind, cfg.noise_args, "noise", NOISE_METHODS)
    common: dict[str, Any] = dict(activation=activation or cfg.activation, sigma_U=cfg.sigma_U, sigma_W=cfg.sigma_W,
                                  scale=cfg.noise_scale, gain=cfg.gain)
    if kind in ("mlp", "mlp_gaussian"):
        mode: Literal["weights", "gaussian"] = "weights" if kind == "mlp" else "gaussian"
        rng = "torch" if cfg.capture else resolve_backend(cfg.rng, cfg.device)  # a capture replays torch's draws only
        return RandomMLP(width=cfg.m, mode=mode, rng=rng, precision=cfg.draw_precision, law=cfg.weight_law,
                         nu=cfg.student_nu, **common)
    if kind == "random_features":
        return RandomFeatureField(features=cfg.features, token_chunk=token_chunk, rng=resolve_backend(cfg.rng, cfg.device), **common)
    return ExactField(make_kernel(cfg, activation), rng=resolve_backend(cfg.rng, cfg.device))


def make_model(
    cfg: RunConfig,
    dtype=torch.float64,
    device="cpu",
    attention: Optional[Attention] = None,
    noise: Optional[NoiseSource] = None,
    activation: Optional[ActivationLike] = None,
) -> Union[Transformer, LimitSDE]:
    """The model of ``cfg``: a [`Transformer`][stochformer.model.transformer.Transformer] or a [`LimitSDE`][stochformer.model.sde.LimitSDE] with its integrator.

    ``attention`` / ``noise``: prebuilt pieces (a chunked attention, a field shared between
    systems) used instead of building them from ``cfg``; ``activation``: any callable φ replacing
    ``cfg.activation``.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    dtype : torch.dtype, optional
        The tensors' dtype.
    device : str or torch.device, optional
        Their device.
    attention : Attention, optional
        A prebuilt attention.
    noise : NoiseSource, optional
        A prebuilt noise source.
    activation : str or callable, optional
        φ replacing the config's.

    Returns
    -------
    Transformer or LimitSDE
        The model.
    """
    attention = attention if attention is not None else make_attention(cfg, dtype, device)
    noise = noise if noise is not None else make_noise(cfg, activation)
    if cfg.dynamics == "transformer":
        return Transformer(attention, noise, cfg.order)
    return LimitSDE(attention, noise, INTEGRATORS[cfg.integrator], make_kernel(cfg, activation).kappa1)


def make_field(
    cfg: RunConfig, fields: int, generator: torch.Generator, dtype=torch.float64, device="cpu",
    token_chunk: Optional[int] = 4096,
) -> RandomFeatureField:
    """``fields`` independent random-feature fields of width ``cfg.features`` (activation, σ_U,
    σ_W, noise scale, gain from ``cfg``), their features drawn now from ``generator``: a field to share
    between systems of any N (SPEC §4).

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    fields : int
        Independent fields (1: one shared by every sample).
    generator : torch.Generator
        Draws the features.
    dtype : torch.dtype, optional
        The tensors' dtype.
    device : str or torch.device, optional
        Their device.
    token_chunk : int, optional
        Tokens per chunk.

    Returns
    -------
    RandomFeatureField
        The field, drawn.
    """
    field = RandomFeatureField(
        activation=cfg.activation, features=cfg.features, sigma_U=cfg.sigma_U, sigma_W=cfg.sigma_W,
        scale=cfg.noise_scale, token_chunk=token_chunk, gain=cfg.gain, rng=resolve_backend(cfg.rng, cfg.device),
    )
    field.draw(fields, cfg.d, generator, dtype, device)
    return field


def make_particles(
    cfg: RunConfig, field: Optional[RandomFeatureField], N: int, dtype=torch.float64, device="cpu",
    block: int = DEFAULT_BLOCK, sdpa: bool = True,
) -> LimitSDE:
    """The mean-field particle system (SPEC §4): the limit SDE of ``cfg`` for N tokens with
    memory-linear attention (query chunks sized by [`query_chunk`][stochformer.model.attention.query_chunk], or fused SDPA; a variant's
    attention is dense) driven by ``field``.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    field : RandomFeatureField or None
        The field driving the particles (None: the config's noise).
    N : int
        Tokens.
    dtype : torch.dtype, optional
        The tensors' dtype.
    device : str or torch.device, optional
        Their device.
    block : int, optional
        Score entries per attention chunk.
    sdpa : bool, optional
        Fused attention.

    Returns
    -------
    LimitSDE
        The particle system.
    """
    if cfg.dynamics != "sde":
        raise ValueError("dynamics: the particle solver integrates the limit SDE (dynamics = 'sde')")
    use_field = cfg.mlp and cfg.noise_scale > 0
    if use_field and field is None:
        raise ValueError("the particle solver needs a field (make_field) when the noise is on")
    attention = make_attention(cfg, dtype, device, query_chunk(N, block), sdpa)
    # dynamics = "sde" (checked above): make_model builds a LimitSDE
    return cast(LimitSDE, make_model(cfg, dtype, device, attention=attention, noise=field if use_field else None))


def make_grouped_particles(
    cfg: RunConfig, sizes: list[int], dtype=torch.float64, device="cpu", block: int = DEFAULT_BLOCK, sdpa: bool = True,
) -> LimitSDE:
    """Systems of ``sizes`` tokens stepped as one concatenated cloud (batch, Σ sizes, d), all driven
    by the exact field of ``cfg`` drawn jointly at every point ([`JointField`][stochformer.model.grouped.JointField]),
    each attending only to its own tokens ([`GroupedAttention`][stochformer.model.grouped.GroupedAttention]): the
    exact-field coupling of Proposition 1.2 (SPEC §3–§4).

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    sizes : list of int
        The systems' token counts.
    dtype : torch.dtype, optional
        The tensors' dtype.
    device : str or torch.device, optional
        Their device.
    block : int, optional
        Score entries per attention chunk.
    sdpa : bool, optional
        Fused attention.

    Returns
    -------
    LimitSDE
        The concatenated systems.
    """
    if cfg.dynamics != "sde":
        raise ValueError("dynamics: the particle solver integrates the limit SDE (dynamics = 'sde')")
    attention = make_attention(cfg, dtype, device, query_chunk(max(sizes), block), sdpa)
    noise = JointField(ExactField(make_kernel(cfg))) if cfg.mlp and cfg.noise_scale > 0 else None
    grouped = GroupedAttention(attention, tuple(sizes)) if attention is not None else None
    return LimitSDE(grouped, noise, INTEGRATORS[cfg.integrator], make_kernel(cfg).kappa1)
