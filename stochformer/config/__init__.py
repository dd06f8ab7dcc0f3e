"""Validated run configuration (pydantic), TOML loading and ``FIELD=VALUE`` overrides.

Field names follow SPEC §1 (``N, d, L, T, m, sigma_U, sigma_W, beta, gamma, Q, K, V``; ``gain`` g of SPEC §8). Every
invalid input raises [`ConfigError`][stochformer.config.ConfigError], one message naming each bad field and its valid range,
before any work starts.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional, Union, get_args, get_origin

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from ..model.activations import ACTIVATIONS, get_activation
from ..io.tokens import load_token_array
from ..core.validation import INT_MAX, ArgumentTypeError, clip, import_object, short
from ..model.attention_variants import ATTENTION_KINDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GAMMA_WORDS = {"attractive": 1.0, "none": 0.0, "repulsive": -1.0}


class ConfigError(ValueError):
    """An invalid configuration: the message names the field(s) and the valid range."""


#: the deepest nesting of lists and tables a value may have (a matrix is 2, a sweep's points 3)
MAX_DEPTH = 32
#: an error message shows at most this many bad fields, each in at most this many characters
MESSAGE_LINES, MESSAGE_LINE = 8, 300
#: the most points a grid of one command may have (every point is checked and sized before any work)
MAX_GRID_POINTS = 100_000


def check_grid_size(n_points: int, fields: str) -> None:
    """``ValueError`` naming ``fields`` (the axes) when a grid has more than `MAX_GRID_POINTS`
    points: refused before its points are built, checked or sized.

    Parameters
    ----------
    n_points : int
        The grid's points.
    fields : str
        The axes, for the message.
    """
    if n_points > MAX_GRID_POINTS:
        raise ValueError(f"{fields}: {n_points} grid points; a grid has at most {MAX_GRID_POINTS} "
                         "(split it into several runs)")


def _items(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    return list(value.values()) if isinstance(value, dict) else []


def _depth(value: Any) -> int:
    """How deeply lists and tables nest in ``value`` (0 for a scalar), without recursion."""
    deepest, level = 0, [(value, 0)]
    while level:
        item, depth = level.pop()
        inner = _items(item)
        if inner or isinstance(item, (list, tuple, dict)):
            deepest = max(deepest, depth + 1)
            if deepest > MAX_DEPTH:
                return deepest
            level.extend((v, depth + 1) for v in inner)
    return deepest


def _too_big(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool) and abs(item) > INT_MAX:
            return True
        stack.extend(_items(item))
    return False


def check_depth(data: Any, where: str) -> None:
    """``ConfigError`` naming ``where`` if lists and tables nest more than `MAX_DEPTH` deep.

    Parameters
    ----------
    data : Any
        Parsed configuration data.
    where : str
        Where it comes from, for the message.
    """
    if _depth(data) > MAX_DEPTH:
        raise ConfigError(f"{where}: lists and tables nest more than {MAX_DEPTH} levels deep")


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


class StrictConfig(BaseModel):
    """The base of every config: unknown fields, NaN and infinities refused; pydantic's strict mode,
    so booleans, numbers and strings are never converted into one another (an integer is still
    accepted where a float is meant); integers within int64."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_assignment=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numpy_scalars(cls, value: Any) -> Any:
        """numpy scalars (``np.int64(3)``, also inside lists) as the Python numbers they hold."""
        return _plain(value)

    @field_validator("*", mode="after")
    @classmethod
    def _int64(cls, value: Any, info: Any) -> Any:
        if info.field_name != "seed" and _too_big(value):  # seed has its own range (< 2**64)
            raise ValueError("integers beyond int64 are not accepted (|value| <= 2**63 - 1)")
        return value


class InitConfig(StrictConfig):
    """Initial tokens: ``uniform`` on S^{d−1}, a ``npy`` file of shape (N, d) or (batch, N, d),
    a ``cluster`` around ``center`` (default e₁) with Gaussian ``spread``, or a ``pair`` of tokens at
    ``cosine`` (N = 2), randomly rotated per sample."""

    kind: Literal["uniform", "npy", "cluster", "pair"] = "uniform"
    path: Optional[Annotated[Path, Field(strict=False)]] = None
    center: Optional[list[float]] = None
    spread: float = Field(0.1, ge=0.0)
    cosine: float = Field(0.5, ge=-1.0, le=1.0)

    @model_validator(mode="after")
    def _check(self) -> "InitConfig":
        if self.kind == "npy" and self.path is None:
            raise ValueError("init.path: required when init.kind = 'npy' (a .npy file of shape (N, d))")
        for name, kind in _INIT_USED_BY.items():  # a field that cannot take effect is an error
            if self.kind != kind and getattr(self, name) != type(self).model_fields[name].default:
                raise ValueError(f"init.{name}: has no effect with init.kind = {self.kind!r} (it is used only "
                                 f"with init.kind = {kind!r}); remove it or set init.kind = {kind!r}")
        return self


#: the init fields that only one init.kind reads
_INIT_USED_BY = {"path": "npy", "center": "cluster", "spread": "cluster", "cosine": "pair"}


#: a validation context's key (`validate`): the token file of ``init.path`` is checked against each
#: point's N and d (a sweep's), not against the base config's
TOKENS_PER_POINT = "tokens_per_point"
#: the noise sources a config names (besides an import string)
NOISE_KINDS = ("auto", "mlp", "mlp_gaussian", "exact", "random_features")
#: the built-in values of each field whose parts state ``capture_safe`` (`RunConfig`'s capture check;
#: a Transformer of SoftmaxAttention and RandomMLP, whose draws a capture makes torch's)
CAPTURABLE: dict[str, tuple[Any, ...]] = {"dynamics": ("transformer",), "attention_kind": ("softmax",),
                                          "attention_batch": (None,), "noise": ("auto", "mlp", "mlp_gaussian")}
#: the methods of one's own attention and noise source (the protocols of stochformer.model)
ATTENTION_METHODS, NOISE_METHODS = ("__call__",), ("reset", "increment")


def make_part(spec: str, args: dict[str, Any], field: str, protocol: tuple[str, ...]) -> Any:
    """One's own model part: the factory (a class or function) that the import string ``spec``
    (``"package.module:factory"``) names, called with the keywords ``args``; the result must have
    the methods ``protocol`` (``__call__`` for an attention; ``reset`` and ``increment`` for a noise
    source).
    ``ValueError`` naming ``field`` otherwise.

    A config calls it when it is validated (so a bad part fails before any work) and the builders
    of [`build`][stochformer.config.build] call it again for each model (and once more for κ): a
    part is built afresh for every model, never kept on the config, so that two models built from
    one config (side by side in one experiment, or in other processes, where a built part need not
    pickle) never share a part's per-run state. A factory should therefore be cheap and free of side
    effects; to run one object, pass the model itself (``model=``).

    Parameters
    ----------
    spec : str
        ``"package.module:factory"``.
    args : dict
        Keyword arguments of the factory.
    field : str
        The config field, for messages.
    protocol : tuple of str
        The methods the part must have.

    Returns
    -------
    Any
        The part.
    """
    factory = import_object(spec, field)
    if not callable(factory):
        raise ValueError(f"{field}: {spec!r} names a {type(factory).__name__}, not a class or function")
    try:
        part = factory(**args)
    except Exception as exc:  # the user's code: any failure is the part's, reported as the field's
        raise ValueError(f"{field}: {spec}(**{args!r}) failed: {type(exc).__name__}: {clip(str(exc))}") from None
    missing = [name for name in protocol if not callable(getattr(part, name, None))]
    if missing:
        raise ValueError(f"{field}: {spec}(**{args!r}) gave a {type(part).__qualname__}, which has no "
                         + ", ".join(f"{name}(...)" for name in missing))
    return part


class RunConfig(StrictConfig):
    """One simulation of the deep transformer (SPEC §1) or of its limit SDE (SPEC §3).

    The fields below are the ``--set`` keys of the command line and the keys of a TOML config; each
    is checked on construction. [`as_config`][stochformer.config.as_config] of a dict raises one
    [`ConfigError`][stochformer.config.ConfigError] naming the field and its valid range.

    Examples
    --------
    >>> from stochformer.config import RunConfig, as_config
    >>> cfg = RunConfig(N=8, d=4, L=50)
    >>> cfg.T / cfg.L                                   # the step Δt = T/L
    0.1
    >>> cfg.with_updates(gamma="repulsive").gamma_value
    -1.0
    >>> as_config({"N": 1})
    Traceback (most recent call last):
    ...
    stochformer.config.ConfigError: invalid configuration: N: must be an integer >= 2 (got 1)
    """

    # model sizes
    N: int = Field(16, ge=2, description="number of tokens (>= 2)")
    d: int = Field(3, ge=2, description="token dimension (>= 2)")
    L: int = Field(100, ge=1, description="depth (layers or SDE steps), >= 1")
    T: float = Field(5.0, gt=0.0, description="time horizon, > 0; step Δt = T/L")
    m: int = Field(256, ge=1, description="MLP width (>= 1)")
    # MLP
    activation: str = Field("relu", description="φ: a name (relu, tanh, …) or an import string 'package.module:function'")
    sigma_U: float = Field(0.0, ge=0.0, description="std of the inner bias b_U")
    sigma_W: float = Field(0.0, ge=0.0, description="std of the outer bias b_W")
    gain: float = Field(1.0, ge=0.0, description="g: std of the inner weights U, which have variance g² (>= 0, finite; "
                        "SPEC §8, the order-to-chaos transition)")
    noise_scale: float = Field(1.0, ge=0.0, description="overall scale s of the MLP (κ → s²κ)")
    mlp: bool = True
    # attention: Qᵀ K = βI and V = γI unless explicit matrices are given
    attention: bool = True
    beta: float = 1.0
    gamma: Union[float, Literal["attractive", "none", "repulsive"]] = 1.0
    Q: Optional[list[list[float]]] = None
    K: Optional[list[list[float]]] = None
    V: Optional[list[list[float]]] = None
    order: Literal["post_ln", "parallel"] = "post_ln"
    # attention variants (SPEC §7, stochformer.model.attention_variants)
    attention_kind: str = Field(
        "softmax",
        description="attention: 'softmax' (SPEC §1), 'multihead' (`heads` heads splitting the rows of Q, K, V), "
        "'usa' (unnormalised), 'l2' (softmax of -|Qx - Ky|^2), 'sinkhorn' (doubly stochastic), 'resampled' "
        "(fresh random Q, K, V every layer), 'averaged' (the L -> infinity drift of 'resampled'), or an import "
        "string 'package.module:factory' of one's own attention, called with the keywords `attention_args`",
    )
    attention_args: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of an attention given by an import string")
    heads: int = Field(1, ge=1, description="attention heads of 'multihead' (>= 1, must divide d)")
    sinkhorn_iters: int = Field(20, ge=1, le=10000, description="Sinkhorn normalisation rounds, in [1, 10000]")
    sinkhorn_tol: Optional[float] = Field(None, gt=0.0, description="stop Sinkhorn once row sums are within this of 1 (> 0)")
    attention_std: float = Field(1.0, ge=0.0, description="std σ of the random parts σZ/√d of Q, K, V ('resampled', 'averaged')")
    attention_draws: int = Field(256, ge=1, description="Monte Carlo draws of (Q, K) of the 'averaged' drift (>= 1)")
    attention_seed: int = Field(0, ge=0, le=2**64 - 1, description="seed of the 'averaged' drift's draws")
    attention_batch: Optional[int] = Field(
        None, ge=2,
        description="random-batch softmax attention (Jin-Li-Liu): each token attends to its p - 1 batch-mates of a "
        "random partition redrawn every step (>= 2; None: exact attention over all tokens)",
    )
    # law of the explicit MLP weights U, W (SPEC §7); biases stay Gaussian
    weight_law: Literal["gaussian", "rademacher", "uniform", "student_t"] = Field(
        "gaussian",
        description="law of the i.i.d. unit-variance MLP weights U, W: 'gaussian', 'rademacher', 'uniform' "
        "(on [-sqrt 3, sqrt 3]), 'student_t' (nu = student_nu, rescaled); non-Gaussian laws need noise = 'mlp' or 'auto'",
    )
    student_nu: float = Field(5.0, gt=4.0, le=1e6, description="degrees of freedom of 'student_t' (> 4: finite fourth moment)")
    # what evolves and how
    dynamics: Literal["transformer", "sde"] = "transformer"
    noise: str = Field(
        "auto",
        description="noise source: 'mlp' draws U, W, b explicitly; 'mlp_gaussian' draws U, b_U and "
        "the output from its exact conditional Gaussian law (SPEC §2); 'exact' is the limit field "
        "K^{1/2} Ξ; 'random_features' a fixed random-feature field of width `features`; 'auto' is "
        "mlp_gaussian for the transformer; for the SDE exact below N = 92·features/1024 (the measured "
        "cost crossover, build.RF_CROSSOVER_N) and random_features from there on; or an import string 'package.module:factory' of one's own noise "
        "source (an object with reset(...) and increment(X, dt, draws); with noise_kernel(d) where a measurement needs κ), "
        "called with the keywords `noise_args`",
    )
    noise_args: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of a noise source given by an import string")
    integrator: Literal["euler", "heun"] = Field(
        "heun",
        description="SDE integrator: 'heun' (projected Stratonovich Heun, default: smaller error at "
        "equal cost) or 'euler' (projected Euler-Maruyama, Itô); see docs/convergence.md",
    )
    features: int = Field(1024, ge=1, description="width of the random-feature field (>= 1)")
    # samples, numerics, outputs
    batch: int = Field(8, ge=1, description="independent weight draws (>= 1)")
    seed: int = Field(0, ge=0, le=2**64 - 1, description="random seed (0 <= seed < 2**64)")
    dtype: Literal["float64", "float32"] = "float64"
    rng: Literal["auto", "torch", "parallel"] = Field(
        "auto",
        description="normal sampler of the 'mlp_gaussian' noise and of the SDE fields' fresh Brownian "
        "normals ('exact', 'random_features'): 'torch' (the run's generator), 'parallel' (streams seeded "
        "from it, filled on all CPU cores; numpy SFC64 for float64), 'auto' = parallel on a CPU and torch "
        "on CUDA; same seed => same numbers on the same device",
    )
    draw_precision: Literal["full", "float32"] = Field(
        "full",
        description="opt-in: 'float32' draws the MLP's normals in float32 and casts them to dtype "
        "(faster; each draw rounded to float32); 'full' (default) draws them in dtype",
    )
    device: str = "cpu"
    energy_beta: float = Field(1.0, gt=0.0, le=700.0, description="β of the diagnostic E_β, 0 < β <= 700 (e^β finite)")
    record_every: int = Field(1, ge=1, description="record statistics every k layers (>= 1)")
    path_stride: Optional[int] = Field(None, ge=1, description="save token paths every k layers")
    capture: bool = Field(
        False,
        description="replay the layers between records as one captured graph (a CUDA graph on a GPU, where kernel "
        "launches otherwise set the time; a traced graph on a CPU, slower there: a check); the numbers of "
        "capture = false; only where every part built states capture_safe (transformer dynamics with softmax "
        "attention and the MLP noise, or parts of one's own that state it), rng 'torch' ('auto' becomes 'torch'); "
        "see `solve(capture=...)`",
    )
    init: InitConfig = Field(default_factory=InitConfig)

    def _check_capture(self) -> None:
        """What ``solve(capture=True)`` can replay, by field, before any model is built: the parts
        this config builds must state ``capture_safe`` (solve's rule, `core.capture.unsafe_parts`):
        a built-in value among `CAPTURABLE`, a part of one's own (an import string) asked itself; and
        the draws are torch's (``rng`` 'auto' becomes 'torch'). Fields of parts the config does not
        build (attention = false; no MLP or noise_scale = 0) are not asked. tests/test_capture.py
        checks that a config accepts exactly what solve captures."""
        from ..core.capture import unsafe_parts

        if self.rng == "parallel":
            raise ValueError("rng: capture = true replays torch's draws: needs 'auto' or 'torch' (got 'parallel'), "
                             "or capture = false")
        built = {"dynamics": True, "attention_kind": self.attention, "attention_batch": self.attention,
                 "noise": self.mlp and self.noise_scale != 0}
        for field, valid in CAPTURABLE.items():
            value = getattr(self, field)
            if not built[field] or value in valid:
                continue
            own = field in ("attention_kind", "noise")
            if own and ":" in value:
                protocol = ATTENTION_METHODS if field == "attention_kind" else NOISE_METHODS
                part = make_part(value, getattr(self, field.removesuffix("_kind") + "_args"), field, protocol)
                if not unsafe_parts(part):
                    continue
                raise ValueError(f"{field}: capture = true needs a part that states capture_safe (got {clip(repr(value))}: "
                                 f"{type(part).__name__} does not), or capture = false")
            yours = " or one of one's own that states capture_safe" if own else ""
            raise ValueError(f"{field}: capture = true needs {' or '.join(map(repr, valid))}{yours} (got "
                             f"{clip(repr(value))}), or capture = false")

    @field_validator("activation")
    @classmethod
    def _activation(cls, v: str) -> str:
        if ":" in v:  # a user's φ, 'package.module:function': imported now, so a bad one fails before any work
            get_activation(v)
        elif v not in ACTIVATIONS:
            raise ValueError(f"unknown activation {clip(v)!r}; valid names are {', '.join(sorted(ACTIVATIONS))}, "
                             "or an import string 'package.module:function'")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        valid = v == "cpu" or v == "cuda" or (v.startswith("cuda:") and v[5:].isascii() and v[5:].isdigit())
        try:
            valid = valid and torch.device(v) is not None
        except RuntimeError:  # an index beyond what torch parses
            valid = False
        if not valid:
            raise ValueError("must be 'cpu', 'cuda' or 'cuda:<index>' with an index torch accepts")
        return v

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> "RunConfig":
        for field, names, protocol in (("attention_kind", ATTENTION_KINDS, ATTENTION_METHODS),
                                       ("noise", NOISE_KINDS, NOISE_METHODS)):
            spec, args = getattr(self, field), getattr(self, field.removesuffix("_kind") + "_args")
            if ":" in spec:  # one's own part: built now, so a bad one fails before any work
                make_part(spec, args, field, protocol)
            elif spec not in names:
                raise ValueError(f"{field}: unknown {spec!r}; valid: {', '.join(names)}, or an import string "
                                 "'package.module:factory'")
            elif args:
                raise ValueError(f"{field.removesuffix('_kind')}_args: only for a part given by an import string "
                                 f"(got {field} = {spec!r})")
        for name in ("Q", "K", "V"):
            mat = getattr(self, name)
            if mat is not None:
                if len(mat) != self.d or any(len(row) != self.d for row in mat):
                    raise ValueError(f"{name}: must be a d x d matrix with d = {self.d}")
        if self.attention_batch is not None and (self.attention_kind != "softmax" or not self.attention):
            raise ValueError("attention_batch: random batches apply to softmax attention (attention_kind = 'softmax', "
                             f"attention = true; got attention_kind = {self.attention_kind!r}, attention = {self.attention})")
        if self.attention_kind == "multihead" and self.d % self.heads:
            raise ValueError(f"heads: must divide d = {self.d} (got {self.heads})")
        if self.attention_kind == "resampled" and self.dynamics != "transformer":
            raise ValueError("attention_kind: 'resampled' draws Q, K, V per layer and needs dynamics = 'transformer'; "
                             "its limit is attention_kind = 'averaged'")
        if self.weight_law != "gaussian" and self.noise not in ("auto", "mlp"):
            raise ValueError(f"weight_law: {self.weight_law!r} needs explicit weights, noise = 'mlp' or 'auto' "
                             f"(got noise = {self.noise!r})")
        if ":" in self.activation:  # a user's φ, called once now so that one failing fails before any work
            get_activation(self.activation)(torch.linspace(-4.0, 4.0, 9, dtype=getattr(torch, self.dtype)))
        if self.capture:
            self._check_capture()
        if self.init.kind == "npy" and self.init.path is not None and not (info.context or {}).get(TOKENS_PER_POINT):
            load_token_array(self.init.path, self.batch, self.N, self.d)
        if self.init.kind == "pair" and self.N != 2:
            raise ValueError(f"init.kind = 'pair' needs N = 2 (got N = {self.N})")
        if self.init.center is not None and len(self.init.center) != self.d:
            raise ValueError(f"init.center: must have d = {self.d} entries")
        if self.init.center is not None and not any(c != 0 for c in self.init.center):
            raise ValueError("init.center: must be a non-zero vector")
        return self

    @property
    def gamma_value(self) -> float:
        """γ as a number (the one-word options map to +1, 0, −1)."""
        return GAMMA_WORDS[self.gamma] if isinstance(self.gamma, str) else float(self.gamma)

    @property
    def dt(self) -> float:
        return self.T / self.L

    def with_updates(self, **updates: Any) -> "RunConfig":
        """A validated copy with top-level or dotted fields replaced.

        Parameters
        ----------
        **updates : Any
            Field name (dotted for a nested field) → value.

        Returns
        -------
        RunConfig
            The validated copy.
        """
        return build_config(self.model_dump(mode="json"), [f"{k}={json.dumps(v)}" for k, v in updates.items()])


#: the shortest horizon of an experiment that measures how tokens move (its ``model_min`` of T)
MEASURED_HORIZON = (1e-6, "what is measured changes with t = layer · T/L, and over a shorter horizon by less than "
                    "float64 resolves")


class ExperimentConfig(StrictConfig):
    """An experiment's config: ``model``, the [`RunConfig`][stochformer.config.RunConfig] of the system it runs (a ``[model]``
    table in TOML, ``--set model.N=…``), beside the experiment's own fields.

    A subclass states, as data, how it reads ``model``: ``model_defaults`` (its defaults of model
    fields, below what a file or ``--set`` gives), ``model_fixed`` (values it needs), ``model_min``
    (lower bounds it adds: ``{field: (bound, why)}``), ``model_unused`` (fields it does not read,
    with what it uses instead: setting one of those is an error, so no field is silently ignored) and
    ``needs_noise`` (it measures the MLP noise: mlp on and noise_scale > 0)."""

    command: ClassVar[str] = "experiment"
    model_defaults: ClassVar[dict[str, Any]] = {}
    model_fixed: ClassVar[dict[str, tuple[Any, str]]] = {}
    model_min: ClassVar[dict[str, tuple[float, str]]] = {}
    model_unused: ClassVar[dict[str, str]] = {}
    needs_noise: ClassVar[bool] = False

    model: RunConfig = Field(default_factory=RunConfig)

    @model_validator(mode="before")
    @classmethod
    def _model_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = data.get("model", {})
            if isinstance(given, RunConfig):
                given = given.model_dump(exclude_unset=True)
            if isinstance(given, dict):
                defaults = {**cls.model_defaults, **{k: v for k, (v, _) in cls.model_fixed.items()}}
                data = {**data, "model": {**defaults, **given}}
        return data

    @model_validator(mode="after")
    def _model_use(self) -> "ExperimentConfig":
        run = self.model
        for name, (value, why) in self.model_fixed.items():
            if getattr(run, name) != value:
                raise ValueError(f"model.{name}: {self.command} needs {value!r} ({why}; got {getattr(run, name)!r})")
        for name, (low, why) in self.model_min.items():
            if getattr(run, name) < low:
                raise ValueError(f"model.{name}: must be >= {low:g} for {self.command}, {why} (got {getattr(run, name)!r})")
        for name, instead in self.model_unused.items():
            if getattr(run, name) != RunConfig.model_fields[name].get_default(call_default_factory=True):
                raise ValueError(f"model.{name}: has no effect in {self.command} ({instead}); remove it")
        if run.capture:
            raise ValueError(f"model.capture: {self.command} does not capture its steps (only simulate does); remove it")
        if self.needs_noise and (not run.mlp or run.noise_scale == 0):
            raise ValueError(f"model.mlp: {self.command} needs the MLP noise (model.mlp = true and model.noise_scale > 0)")
        return self


#: pydantic error types about the value's type or range: replaced by "must be <valid values>"
_RANGE_ERRORS = {
    "greater_than", "greater_than_equal", "less_than", "less_than_equal", "literal_error", "finite_number",
    "int_parsing", "int_from_float", "int_type", "float_parsing", "float_type", "bool_parsing", "bool_type",
}


def _field_at(model: Optional[type[BaseModel]], loc: tuple) -> tuple[list[str], Any]:
    """The longest prefix of ``loc`` naming (nested) fields of ``model``, and the last FieldInfo."""
    names: list[str] = []
    info = None
    while model is not None and loc and isinstance(loc[0], str) and loc[0] in model.model_fields:
        info = model.model_fields[loc[0]]
        names.append(loc[0])
        loc = loc[1:]
        ann = info.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return names, info


#: how close (difflib's ratio, 0 to 1) a valid name must be to an unknown one to be suggested: one letter
#: dropped, added, changed or two swapped in a name of 4 or more letters is >= 0.75
SUGGEST_CUTOFF = 0.7
#: the most names suggested for one unknown field
SUGGEST_COUNT = 3


def closest_fields(name: str, model: Any) -> list[str]:
    """The valid field names of ``model`` closest to the unknown ``name`` (``difflib``, case
    ignored, ratio >= `SUGGEST_CUTOFF`, at most `SUGGEST_COUNT`, best first), with the
    fields of its nested configs as dotted names (``N`` given to an experiment suggests ``model.N``).
    An exact match of a nested field comes first; an empty list when nothing is close.

    Parameters
    ----------
    name : str
        The unknown field.
    model : type of pydantic.BaseModel
        The config class.

    Returns
    -------
    list of str
        Suggestions, best first.
    """
    fields = getattr(model, "model_fields", None) or {}
    candidates = list(fields)
    for outer, info in fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            candidates += [f"{outer}.{inner}" for inner in ann.model_fields]
    exact = [c for c in candidates if c.rsplit(".", 1)[-1] == name]
    by_lower: dict[str, str] = {}
    for c in candidates:
        by_lower.setdefault(c.lower(), c)
    close = [by_lower[c] for c in difflib.get_close_matches(name.lower(), list(by_lower), SUGGEST_COUNT, SUGGEST_CUTOFF)]
    return list(dict.fromkeys(exact + close))[:SUGGEST_COUNT]


def _valid_text(info: Any) -> str:
    """The valid values of a field from its annotation and ``ge/gt/le/lt`` constraints."""
    bounds = []
    for meta in info.metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                bound = getattr(meta, attr)
                bounds.append(f"{sym} {bound}" if isinstance(bound, int) else f"{sym} {bound:g}")
    kinds = []
    ann = info.annotation
    for t in (ann,) if get_origin(ann) in (Literal, list) else (get_args(ann) or (ann,)):
        if get_origin(t) is Literal:
            kinds.append("one of " + ", ".join(repr(a) for a in get_args(t)))
        elif t is bool:
            kinds.append("true or false")
        elif t is int:
            kinds.append("an integer")
        elif t is float:
            kinds.append("a finite number")
        elif get_origin(t) is list:
            nested = any(get_origin(a) is list for a in get_args(t))
            kinds.append("a matrix (list of rows) of finite numbers" if nested else
                         "a list of integers" if get_args(t) == (int,) else "a list of finite numbers")
    text = " or ".join(dict.fromkeys(kinds))
    return " ".join(x for x in (text, " and ".join(bounds)) if x)


def _format_validation_error(err: ValidationError, model: Optional[type[BaseModel]] = None) -> str:
    """One line per bad field: ``field: what is wrong (got X); valid: range``."""
    lines: dict[str, str] = {}
    for e in err.errors():
        loc = tuple(e["loc"])
        names, info = _field_at(model, loc)
        got = e.get("input")
        got_txt = "" if isinstance(got, dict) else f" (got {short(got)})"
        if e["type"] == "extra_forbidden":
            parent, _ = _field_at(model, loc[:-1])
            sub: Any = model
            for n in parent:
                sub = sub.model_fields[n].annotation
            names_here = list(getattr(sub, "model_fields", None) or {})
            field = ".".join(str(p) for p in loc) or "''"
            close = closest_fields(str(loc[-1]), sub) if loc else []
            prefix = "".join(f"{p}." for p in loc[:-1])
            hint = (f"; did you mean {' or '.join(prefix + c for c in close)}?" if close else
                    f"; valid fields are {', '.join(names_here)}" if names_here else "")
            lines[field] = f"{field}: unknown field{got_txt}{hint}"
            continue
        # errors of one union field (e.g. gamma: a number or a word) collapse into one line
        union = info is not None and len(loc) > len(names) and not isinstance(loc[len(names)], int)
        field = ".".join(names) if union else ".".join(str(p) for p in loc)
        valid = _valid_text(info) if info is not None else ""
        whole = field == ".".join(names)  # the error is about the field itself, not an item of it
        if valid and whole and (union or e["type"] in _RANGE_ERRORS):
            msg, tail = f"must be {valid}", ""
        else:
            msg, tail = e["msg"].removeprefix("Value error, "), (f"; valid: {valid}" if valid else "")
        # model-level checks already start with the field name they are about: give it its full
        # path (the check of a nested model names its fields from that model: prefix the model's path)
        head = msg.split(":", 1)[0]
        if field and len(names) == len(loc) and ":" in msg and head.replace(".", "_").isidentifier():
            owner = field.rsplit(".", 1)[0] if head.split(".")[0] == names[-1] else field
            lines.setdefault(field, msg if owner == head.split(".")[0] else f"{owner}.{msg}")
            continue
        named = not field or msg.startswith(f"{field}.") or msg.startswith(f"{field}:")
        lines.setdefault(field, msg if named else f"{field}: {msg}{got_txt}{tail}")
    shown = [clip(line, MESSAGE_LINE) for line in lines.values()]
    more = f"; and {len(shown) - MESSAGE_LINES} more" if len(shown) > MESSAGE_LINES else ""
    return "invalid configuration: " + "; ".join(shown[:MESSAGE_LINES]) + more


def _nesting(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in ``text`` outside quoted strings."""
    depth = deepest = 0
    quote, escaped = "", False
    for ch in text:
        if quote:
            escaped, quote = (not escaped and ch == "\\" and quote == '"'), ("" if ch == quote and not escaped else quote)
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_value(text: str) -> Any:
    """Parse an override value: JSON/TOML literal (numbers, booleans, arrays), else a string;
    ``ConfigError`` for a value nested more than `MAX_DEPTH` deep.

    Parameters
    ----------
    text : str
        The text after ``=`` of ``--set FIELD=VALUE``.

    Returns
    -------
    Any
        The value.
    """
    text = text.strip()
    if _nesting(text) > MAX_DEPTH:
        raise ConfigError(f"the value nests lists or tables more than {MAX_DEPTH} levels deep")
    for loader in (json.loads, lambda s: tomllib.loads(f"v = {s}")["v"]):
        try:
            return loader(text)
        except (ValueError, tomllib.TOMLDecodeError, RecursionError):
            pass
    return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=VALUE`` strings to a nested dict (returns a new dict).

    Parameters
    ----------
    data : dict
        The nested configuration.
    overrides : list of str
        ``FIELD=VALUE`` strings, nested fields dotted.

    Returns
    -------
    dict
        A new nested dict.
    """
    out = json.loads(json.dumps(data, default=str))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {short(item)}: expected FIELD=VALUE (nested fields dotted, e.g. init.kind=pair)")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(p.strip() for p in parts):
            raise ConfigError(f"--set {short(item)}: empty field name; expected FIELD=VALUE (nested fields dotted, e.g. init.kind=pair)")
        node = out
        for p in parts[:-1]:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {clip(key)}: {short(p)} is not a section")
            node = child
        try:
            node[parts[-1]] = parse_value(value)
        except ConfigError as exc:
            raise ConfigError(f"--set {clip(key)}: {exc}") from None
    return out


#: the largest config file read (bytes); a bigger one is refused before it is read
CONFIG_MAX_BYTES = 4 << 20


def load_toml(path: Union[str, Path]) -> dict[str, Any]:
    """Read a TOML config file (a regular file of at most `CONFIG_MAX_BYTES`), raising
    [`ConfigError`][stochformer.config.ConfigError] if it is missing, unreadable, too big, or not a regular file.

    Parameters
    ----------
    path : str or pathlib.Path
        The file.

    Returns
    -------
    dict
        Its tables and values.
    """
    from ..io.outputs import InputError, read_input

    p = Path(path)
    try:
        return tomllib.loads(read_input(p, "config", CONFIG_MAX_BYTES).decode("utf-8-sig"))  # a byte-order mark (some editors write one) is not TOML: dropped
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config: cannot read {p} as TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config: cannot read {p} as TOML: nested too deeply") from None


def validate(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """Validate ``data`` against ``model``, turning pydantic's errors into one [`ConfigError`][stochformer.config.ConfigError].

    Parameters
    ----------
    model : type of pydantic.BaseModel
        The config class.
    data : dict
        The fields.

    Returns
    -------
    Any
        The validated ``model``.
    """
    check_depth(data, "config")
    try:
        return model.model_validate(data, context=getattr(model, "validation_context", None))
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, model)) from None


def as_config(cfg: Any, model: type[BaseModel] = RunConfig, name: str = "cfg") -> Any:
    """``cfg`` if it is a ``model``; a dict of its fields validated ([`ConfigError`][stochformer.config.ConfigError]); anything
    else is a ``ValueError`` naming the argument (for the experiments' Python API).

    Parameters
    ----------
    cfg : Any
        A config or a dict of its fields.
    model : type of pydantic.BaseModel, optional
        The config class.
    name : str, optional
        The argument's name, for messages.

    Returns
    -------
    Any
        The validated ``model``.
    """
    if isinstance(cfg, model):
        return cfg
    if isinstance(cfg, dict):
        return validate(model, cfg)
    raise ArgumentTypeError(f"{name}: must be a {model.__name__} or a dict of its fields, got {type(cfg).__name__}")


def build_config(
    base: Optional[dict[str, Any]] = None,
    overrides: Optional[list[str]] = None,
    config_file: Optional[Union[str, Path]] = None,
    model: type[BaseModel] = RunConfig,
) -> Any:
    """Defaults ← ``base`` ← ``config_file`` ← ``overrides``, validated into ``model``. For a
    [`RunConfig`][stochformer.config.RunConfig], a ``[model]`` table of the file or overrides (``--set model.N=4``) holds the
    config's own fields, as in an experiment's file (a field given there and at the top level is an error).

    Parameters
    ----------
    base : dict, optional
        Fields over the defaults.
    overrides : list of str, optional
        ``FIELD=VALUE`` strings (``--set``).
    config_file : str or pathlib.Path, optional
        A TOML file.
    model : type of pydantic.BaseModel, optional
        The config class.

    Returns
    -------
    Any
        The validated ``model``.
    """
    given: dict[str, Any] = load_toml(config_file) if config_file is not None else {}
    given = _unwrap_model(apply_overrides(given, list(overrides or [])), model)
    return validate(model, _deep_merge(dict(base or {}), given))


def _unwrap_model(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """A ``[model]`` table (an experiment's file, ``--set model.FIELD``) given to a config without a
    ``model`` field (``RunConfig``: ``simulate``) is the config itself: its fields are merged into the
    top level. A field given both there and at the top level is a [`ConfigError`][stochformer.config.ConfigError]."""
    inner = data.get("model")
    if not (isinstance(model, type) and issubclass(model, RunConfig)) or not isinstance(inner, dict):
        return data
    both = sorted(set(inner) & set(data))
    if both:
        raise ConfigError(f"invalid configuration: {', '.join(both)}: given both at the top level and in [model]; "
                          "keep one")
    rest = {k: v for k, v in data.items() if k != "model"}
    return {**rest, **inner}


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _toml_key(key: str) -> str:
    return key if key and set(key) <= _BARE_KEY else json.dumps(key)


def _toml_value(value: Any) -> str:
    """One TOML value: booleans, integers, floats (``repr``: exact), strings (JSON's escapes are
    TOML's), arrays, inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None) + "}"
    raise ValueError(f"--print-config: cannot write {type(value).__name__} as TOML; use --print-config json")


def _is_tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _toml_table(data: dict[str, Any], path: list[str], out: list[str]) -> None:
    """``data`` as the body of table ``path``: plain keys first (a field that is ``None``, which TOML
    cannot write, becomes a comment), then its sub-tables and arrays of tables."""
    for key, value in data.items():
        if value is None:
            out.append(f"# {_toml_key(key)}: not set")
        elif not isinstance(value, dict) and not _is_tables(value):
            out.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, value in data.items():
        name = ".".join(_toml_key(p) for p in [*path, key])
        if isinstance(value, dict):
            out.append(f"\n[{name}]")
            _toml_table(value, [*path, key], out)
        elif _is_tables(value):
            for item in value:
                out.append(f"\n[[{name}]]")
                _toml_table(item, [*path, key], out)


def to_toml(data: dict[str, Any]) -> str:
    """A TOML document of ``data`` (plain JSON-like values; ``None`` left out as a comment): read back
    by [`load_toml`][stochformer.config.load_toml] to the same values.

    Parameters
    ----------
    data : dict
        Nested JSON-like values.

    Returns
    -------
    str
        The TOML document.
    """
    out: list[str] = []
    _toml_table(data, [], out)
    return "\n".join(out).lstrip("\n") + "\n"


def dump_config(cfg: Any, fmt: str = "toml") -> str:
    """The validated config ``cfg`` (or a dict of configs: one table each) as ``toml`` (readable
    with ``--config``: it validates to the same config) or ``json`` (one object), every field
    included, defaults too.

    Parameters
    ----------
    cfg : Any
        A validated config, or a dict name → config.
    fmt : {"toml", "json"}, optional
        The format.

    Returns
    -------
    str
        The document.
    """
    if isinstance(cfg, BaseModel):
        data = cfg.model_dump(mode="json")
    else:
        data = {k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v for k, v in dict(cfg).items()}
    if fmt == "json":
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
    if fmt == "toml":
        return to_toml(data)
    raise ValueError(f"format: must be 'toml' or 'json' (got {fmt!r})")
