"""One entry point for every dynamics: [`solve`][stochformer.integrate.solve] steps a model from tokens in memory and
returns a labelled `xarray.Dataset`.

The model is anything with ``step(X, dt, draws) -> X'`` and ``reset(batch, d, generator, dtype,
device)``: the discrete [`Transformer`][stochformer.model.Transformer] (SPEC §1), the
[`LimitSDE`][stochformer.model.LimitSDE] (SPEC §3) and, with a random-feature field and chunked
attention, the mean-field particle system (SPEC §4). The randomness of step k is a
[`Draws`][stochformer.core.brownian.Draws]: the run's generator, and the Brownian normals of that step
from ``path`` when one is given (a coupling), else from the generator.

What is kept is a value, [`SaveAt`][stochformer.integrate.SaveAt]; the dataset has dims ``sample``, ``time`` (statistics),
``snapshot`` (token states), ``token`` and ``dim``; the ``time`` coordinate is t = k T/steps (in
the units of T) with the step index ``step`` beside it. Its attributes record T, the steps, the
seed, the model (every part, custom ones marked), the path, versions and device.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, Mapping, Optional, Protocol, Sequence, Union, overload

import numpy as np
import torch
import xarray as xr
from .core.progress import ProgressMeter
from .io.names import NAMES, numeric_attrs
from .io.names import describe as describe_dataset

from .core.brownian import BrownianPath, Draws, step_draws
from .core.capture import Captured, deferring, unsafe_parts
from .measure.diagnostics import STATISTICS, unchecked_pair_statistics
from .model.activations import ACTIVATIONS
from .core.runtime import make_generator, provenance
from .core.sphere import normalize
from .core.validation import (
    INT_MAX,
    Bool,
    EnergyBeta,
    Ints,
    Names,
    PositiveFloat,
    PositiveInt,
    Seed,
    TensorCheck,
    callable_name,
    callable_record,
    check_finite,
    part_name,
    check_part_output,
    object_record,
    NonFiniteError,
    first_call,
    check_unit_rows,
    likely_fields,
    memory_errors,
    rows_off_sphere,
    same_device,
    short,
    validated,
)


class Model(Protocol):
    """What [`solve`][stochformer.integrate.solve] steps: any object with these two methods.

    ``step(X, dt, draws)`` maps the state X (batch, N, d), unit rows, to the state one step ``dt``
    later, with ``draws`` the step's [`Draws`][stochformer.core.brownian.Draws];
    ``reset(batch, d, generator, dtype, device)`` starts a run (per-run state drawn from the
    generator). A model whose state leaves the sphere, e.g. a pre-norm residual stream, sets
    ``on_sphere = False``.

    Examples
    --------
    >>> import torch
    >>> import stochformer as sf
    >>> class Rotate:                               # a deterministic model of one's own
    ...     def reset(self, batch, d, generator, dtype, device):
    ...         pass
    ...     def step(self, X, dt, draws):
    ...         return torch.roll(X, 1, dims=-1)
    >>> X0 = sf.sphere.uniform(batch=1, N=2, d=3, seed=0)
    >>> out = sf.solve(Rotate(), X0, T=1.0, steps=3, seed=0)
    >>> bool(abs(out.X_final.values - X0.numpy()).max() < 1e-12)   # three cyclic shifts of d = 3 coordinates
    True
    """

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Start a run: draw the per-run state (frozen weights, features) from ``generator``.

        Parameters
        ----------
        batch : int
            Independent samples of the run.
        d : int
            Token dimension.
        generator : torch.Generator
            The run's generator, on ``device``.
        dtype : torch.dtype
            The state's dtype.
        device : str or torch.device
            The state's device.
        """
        ...

    def step(self, X: torch.Tensor, dt: float, draws: Draws) -> torch.Tensor:
        """One step (one layer) of size ``dt``.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The state (unit rows for a model on the sphere).
        dt : float
            The step, T/steps.
        draws : Draws
            The step's randomness: the generator, and the shared Brownian path if any.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            The state one step later.
        """
        ...


ModelSource = Union[Model, Callable[[Any], Model]]
"""``model=`` of an experiment ([`run_simulate`][stochformer.experiments.simulate.run_simulate],
[`run_sync`][stochformer.experiments.sync.run_sync], [`run_phase`][stochformer.experiments.phase.run_phase], ...):
a [`Model`][stochformer.integrate.Model], stepped in every run instead of the config's own (where the
runs share one model configuration), or a factory ``factory(cfg) -> model`` called with each run's
[`RunConfig`][stochformer.config.RunConfig]; checked, resolved and recorded by
[`GivenModels`][stochformer.config.build.GivenModels] (docs/usage.md, "A model of one's own")."""


#: ``hook(k, X)`` after step k (1..steps): returns the state to continue from (or None: X itself)
Hook = Callable[[int, torch.Tensor], Optional[torch.Tensor]]
#: ``fn(X)`` of [`SaveAt`][stochformer.integrate.SaveAt]: observables of the state X (batch, N, d), each a tensor (batch, …)
Observables = Callable[[torch.Tensor], Mapping[str, torch.Tensor]]


@dataclass(frozen=True)
class GradStates(TensorCheck):
    """The check of [`solve`][stochformer.integrate.solve]'s initial state: as for any state
    (batch, N, d), but a tensor that requires grad is handed on as it is (its graph kept for
    ``output="torch"``).

    Parameters
    ----------
    dims, low, unit, bounds, leading, what, finite
        As for every tensor check (``stochformer.core.validation.TensorCheck``): the dims' names,
        their least sizes, unit rows, bounds on the values, extra leading dims, the description
        in messages and whether the values must be finite.
    """

    def __call__(self, name: str, value: Any) -> torch.Tensor:
        checked = super().__call__(name, value)
        return value if torch.is_tensor(value) and value.requires_grad else checked


#: names a variable of ``fn`` may not take: the dataset's own variables and coordinates
RESERVED = frozenset({"X", "X_final", "sample", "time", "step", "snapshot", "snapshot_time", "snapshot_step", "token", "dim"})


@validated
@dataclass(frozen=True)
class SaveAt:
    r"""What [`solve`][stochformer.integrate.solve] keeps: a value, not code.

    Steps are indices k = 0..steps of $t_k = k\,T/\text{steps}$; with ``every``, step 0 and the last
    step are always included.

    Parameters
    ----------
    every : int, optional
        Keep the statistics (and ``fn``) every ``every`` steps (>= 1).
    at : sequence of int, optional
        Keep them at these steps instead.
    stats : sequence of str, optional
        Per-sample statistics, names of `STATISTICS` (computed in float64 whatever the state's
        dtype); empty: none.
    tokens_every : int, optional
        Keep the token states every ``tokens_every`` steps (None: none).
    tokens_at : sequence of int, optional
        Keep the token states at these steps.
    final : bool, optional
        Keep the final state as ``X_final``.
    energy_beta : float, optional
        β of the interaction energy $E_\beta$.
    block : int, optional
        Gram entries formed at once by the statistics (None: all; memory-linear for many tokens).
    fn : callable, optional
        Observables of one's own, recorded at the statistics' steps: ``fn(X)`` with X the state
        (batch, N, d) returns ``{name: tensor}``, each tensor (batch, …); it becomes the variable
        ``name`` with dims (sample, time, ``name_0``, …) in float64. Names are identifiers other than
        the statistics' and the dataset's own (``X``, ``X_final``, coordinates); the same names and
        shapes at every step. ``fn`` only reads the state; a ``hook`` of
        [`solve`][stochformer.integrate.solve] changes it.

    Raises
    ------
    ValueError
        A field out of range, naming the field.

    Examples
    --------
    >>> from stochformer import SaveAt
    >>> SaveAt(every=5).stat_steps(12)
    [0, 5, 10, 12]
    """

    every: PositiveInt = 1
    at: Annotated[Optional[Sequence[int]], Ints()] = None
    stats: Annotated[Sequence[str], Names(STATISTICS)] = STATISTICS
    tokens_every: Optional[PositiveInt] = None
    tokens_at: Annotated[Optional[Sequence[int]], Ints()] = None
    final: Bool = True
    energy_beta: EnergyBeta = 1.0
    block: Optional[PositiveInt] = None
    fn: Optional[Observables] = None

    def stat_steps(self, steps: int) -> list[int]:
        """The steps at which the statistics (and ``fn``) are recorded.

        Parameters
        ----------
        steps : int
            The run's number of steps.

        Returns
        -------
        list of int
            Increasing steps in 0..steps (``every``: with 0 and ``steps``); empty if nothing is recorded.
        """
        return _schedule(self.every, self.at, steps) if self.records() else []

    def records(self) -> bool:
        """Whether anything is recorded at the statistics' steps.

        Returns
        -------
        bool
            True where ``stats`` is not empty or ``fn`` is given.
        """
        return bool(self.stats) or self.fn is not None

    def token_steps(self, steps: int) -> list[int]:
        """The steps at which the token states are kept (variable ``X``).

        Parameters
        ----------
        steps : int
            The run's number of steps.

        Returns
        -------
        list of int
            Increasing steps in 0..steps; empty without ``tokens_every`` or ``tokens_at``.
        """
        if self.tokens_every is None and self.tokens_at is None:
            return []
        return _schedule(self.tokens_every or steps, self.tokens_at, steps)

    def keeps(self, steps: int) -> tuple[Callable[[int], bool], Callable[[int], bool]]:
        """Whether step k's statistics and tokens are kept: the rules of `stat_steps` and
        `token_steps` as tests, without listing every step of a long run.

        Parameters
        ----------
        steps : int
            The run's number of steps.

        Returns
        -------
        tuple of two callables
            ``(stats(k), tokens(k))``, each True where step k is kept.
        """
        never: Callable[[int], bool] = lambda k: False  # noqa: E731
        stats = _keeper(self.every, self.at, steps) if self.records() else never
        tokens = never if self.tokens_every is None and self.tokens_at is None else \
            _keeper(self.tokens_every or steps, self.tokens_at, steps)
        return stats, tokens


def _schedule(every: int, at: Optional[Sequence[int]], steps: int) -> list[int]:
    if at is not None:
        out = sorted({int(k) for k in at})
        if out and not (0 <= out[0] and out[-1] <= steps):
            raise ValueError(f"SaveAt: steps to save must lie in 0..{steps} (got {out[0]}..{out[-1]})")
        return out
    return sorted(set(range(0, steps + 1, every)) | {steps})


def _keeper(every: int, at: Optional[Sequence[int]], steps: int) -> Callable[[int], bool]:
    if at is not None:
        return set(_schedule(every, at, steps)).__contains__  # checks the steps to save lie in 0..steps
    return lambda k: k % every == 0 or k == steps


@overload
def solve(model: Model, X0: torch.Tensor, T: float, steps: int, save: SaveAt = ..., seed: Optional[int] = ...,
          generator: Optional[torch.Generator] = ..., path: Optional[BrownianPath] = ..., hook: Optional[Hook] = ...,
          progress: Optional[ProgressMeter] = ..., output: Literal["xarray"] = ..., capture: bool = ...) -> xr.Dataset: ...


@overload
def solve(model: Model, X0: torch.Tensor, T: float, steps: int, save: SaveAt = ..., seed: Optional[int] = ...,
          generator: Optional[torch.Generator] = ..., path: Optional[BrownianPath] = ..., hook: Optional[Hook] = ...,
          progress: Optional[ProgressMeter] = ..., *, output: Literal["torch"], capture: bool = ...) -> dict[str, torch.Tensor]: ...


@validated
def solve(
    model: Model,
    X0: Annotated[torch.Tensor, GradStates(("batch", "N", "d"), (1, 1, 2), what="tokens", finite=False)],
    T: PositiveFloat,
    steps: PositiveInt,
    save: SaveAt = SaveAt(),
    seed: Optional[Seed] = None,
    generator: Optional[torch.Generator] = None,
    path: Optional[BrownianPath] = None,
    hook: Optional[Hook] = None,
    progress: Optional[ProgressMeter] = None,
    output: Literal["xarray", "torch"] = "xarray",
    capture: Bool = False,
) -> Union[xr.Dataset, dict[str, torch.Tensor]]:
    r"""Step ``model`` ``steps`` times with $\Delta t = T/\text{steps}$ from the tokens ``X0``.

    Step $k$ maps the state $X_{k-1}$ (batch, N, d) to $X_k = \text{model.step}(X_{k-1}, \Delta t, \text{draws}_k)$,
    $t_k = k\,\Delta t$; the noise source is reset first (its per-run state is drawn from the generator).

    Parameters
    ----------
    model : Model
        What is stepped: a [`Transformer`][stochformer.model.Transformer] (SPEC §1), a
        [`LimitSDE`][stochformer.model.LimitSDE] (SPEC §3) or any object with ``reset`` and ``step``
        ([`Model`][stochformer.integrate.Model]).
    X0 : torch.Tensor, shape (batch, N, d)
        The initial tokens, unit rows (unless the model sets ``on_sphere = False``); a finite float32
        or float64 tensor (numpy arrays and lists are converted to float64; a tensor that requires
        grad is detached, unless ``output="torch"``).
    T : float
        The time horizon, > 0.
    steps : int
        The number of steps, >= 1.
    save : SaveAt, optional
        What is kept ([`SaveAt`][stochformer.integrate.SaveAt]); by default every statistic at every
        step and the final state.
    seed : int, optional
        The run's seed (weights, features, and the Brownian normals unless ``path`` is given; a
        random attention draws from the run's ``"attention"`` stream, seeded from it by
        [`stream`][stochformer.core.runtime.stream]).
    generator : torch.Generator, optional
        In place of ``seed``: the run's random numbers, on X0's device. The streams of random parts
        derive from the seed it was started with (``generator.initial_seed()``), not from its
        current state.
    path : BrownianPath, optional
        A [`BrownianPath`][stochformer.core.brownian.BrownianPath] whose fine steps are a multiple of
        ``steps``, shared with other runs for a coupling.
    hook : callable, optional
        ``hook(k, X)`` after every step k (1..steps), returning the state to continue from (or None:
        X itself), e.g. the Lyapunov estimator's renormalisation.
    progress : ProgressMeter, optional
        How the run shows its progress ([`ProgressMeter`][stochformer.core.progress.ProgressMeter]:
        a bar over the steps with its label); None: silently.
    output : {"xarray", "torch"}, optional
        ``"xarray"`` (the dataset) or ``"torch"``: a dict of the same variables and coordinates as
        tensors (``X_final`` (batch, N, d), ``X`` (batch, snapshot, N, d), each statistic and
        observable (batch, time, …) in the dtype computed, ``sample``, ``time``, ``step``,
        ``snapshot_time``, ``snapshot_step``), on X0's device and not detached: with X0 requiring
        grad, ``torch.autograd.grad`` of any of them reaches X0 (a model's weights are validated
        into constants, detached: no gradient reaches them).
    capture : bool, optional
        Replay the steps between two records as one captured graph
        ([`stochformer.core.capture`][stochformer.core.capture]): a CUDA graph on a GPU, where a
        layer's kernel launches would otherwise set the time; on a CPU the same capture traced by
        ``make_fx`` (slower than the plain loop there: it checks that a run can be captured, and
        gives its numbers). The numbers are those of ``capture=False``: the first step runs
        uncaptured (its checks), then graphs of `CAPTURE_STEPS` steps; their flag is read at each
        record (and every `CAPTURE_CHECK` steps), and where a state turned non-finite or a part
        met a rare data-dependent branch (a failed Cholesky factor) the steps since the last
        read run again uncaptured, raising or branching as without capture. Needs a model whose parts state
        ``capture_safe`` (a `Transformer` of `SoftmaxAttention` and `RandomMLP` with
        ``rng="torch"``), no ``path``, no ``hook``, and no autograd.

    Returns
    -------
    xarray.Dataset
        Dims ``sample``, ``time`` (statistics), ``snapshot`` (token states), ``token`` and ``dim``;
        coordinate ``time`` $= t_k$ with the step index ``step`` beside it; attributes record T,
        the steps, the seed, the model, the path, versions and device (see the module docstring).
        With ``output="torch"``, a dict of tensors instead (``output`` above).

    Raises
    ------
    ValueError
        Before any work, naming the argument: X0 not finite or without unit rows, N < 2 while
        statistics are kept, neither seed nor generator, the generator on another device than X0,
        the path's steps not a multiple of ``steps``; ``capture`` with a part that cannot be
        captured (naming it), a path, a hook or X0 requiring grad.
    TypeError
        An argument of the wrong type (e.g. X0 not a tensor, an array or a list).
    NonFiniteError
        A non-finite state, naming the step and the model's likely parameters; a caller that built
        the model from a config names the config's fields instead with
        ``stochformer.core.validation.blamed_on``.

    Examples
    --------
    >>> import torch
    >>> import stochformer as sf
    >>> model = sf.Transformer(attention=sf.SoftmaxAttention(beta=1.0, gamma=1.0),
    ...                        noise=sf.RandomMLP(width=64, activation=torch.tanh))
    >>> X0 = sf.sphere.uniform(batch=4, N=8, d=3, seed=0)
    >>> out = sf.solve(model, X0, T=1.0, steps=10, save=sf.SaveAt(every=5), seed=0)
    >>> out.sizes["time"], out.X_final.shape
    (3, (4, 8, 3))
    """
    grad = output == "torch"
    if not grad:
        X0 = X0.detach()
    if X0.device.type == "meta":
        raise ValueError("X0: is on the meta device (shapes only, no numbers); give tokens on 'cpu' or 'cuda'")
    X = X0
    check_finite(X0.detach(), 0, model)
    on_sphere = bool(getattr(model, "on_sphere", True))
    if on_sphere:
        check_unit_rows("X0", X0)
    B, N, d = X0.shape
    if steps > INT_MAX:
        raise ValueError(f"steps: must be an integer >= 1 and <= 2**63 - 1 (got {steps})")
    keep_stats, keep_tokens = save.keeps(steps)
    stat_steps: list[int] = []  # the steps kept, as they are
    token_steps: list[int] = []
    if N < 2 and save.stats and (save.at is None or len(save.at) > 0):
        raise ValueError(f"X0: the pair statistics {', '.join(save.stats)} need N >= 2 tokens (got N = {N}); "
                         "pass save=SaveAt(stats=()) to run a single token")
    if generator is None:
        if seed is None:
            raise ValueError("seed: give a seed or a generator (every run is seeded)")
        generator = make_generator(seed, X0.device)
    elif not same_device(generator.device, X0.device):
        raise ValueError(f"generator: is on {generator.device}, X0 on {X0.device}; give them the same device")
    if path is not None and path.steps % steps:
        raise ValueError(f"path: steps = {steps} must divide its {path.steps} fine steps")
    if path is not None and any(not part or B % part[0] for part in path.parts):
        # 1 (shared by the samples), B, or B/k for a model of k stacked parts each driven by the path
        raise ValueError(f"path: BrownianPath parts {path.parts} must lead with a divisor of the batch {B} of X0")
    if capture:
        _check_capture(model, path, hook, grad and X0.requires_grad)
    dt = T / steps
    with memory_errors(f"model: a run of tokens of shape {tuple(X0.shape)}", "batch, N or d, or the model's sizes "
                       "(width, features, attention draws)"):
        model.reset(B, d, generator, X0.dtype, X0.device)
        records: list[dict[str, torch.Tensor]] = []
        snapshots: list[torch.Tensor] = []

        def keep(k: int, X: torch.Tensor) -> None:
            if keep_stats(k):
                stat_steps.append(k)
                record: dict[str, torch.Tensor] = {}
                if save.stats:
                    # in float64 whatever the state's dtype: the statistics of the tokens as they are, not
                    # float32's rounding of 1 − cosine (a float32 token's norm is 1 only to ~1e-7)
                    Xs = X if X.dtype == torch.float64 else normalize(X.to(torch.float64))
                    stats = unchecked_pair_statistics(Xs, save.energy_beta, save.block)  # X checked: no second pass
                    record = {name: stats[name] if grad else stats[name].detach().cpu() for name in save.stats}
                if save.fn is not None:
                    record.update(_observables(save, X, records[0] if records else None, grad))
                records.append(record)
            if keep_tokens(k):
                token_steps.append(k)
                snapshots.append(X if grad else X.detach().cpu())

        keep(0, X)
        shape = X0.shape
        ticks = iter(range(1, steps + 1) if progress is None else progress.track(range(1, steps + 1)))
        own_hook = _own(hook)  # one of stochformer's (an experiment's renormalisation), not a user's
        for k in ticks:
            draws = step_draws(generator, path, k - 1, steps)
            if k == 1:
                X = first_call(f"model.step ({callable_name(model)})", _own(type(model)), X, model.step, X, dt, draws)
            else:
                X = model.step(X, dt, draws)
            if k == 1 or not torch.is_tensor(X) or X.shape != shape:
                _first_step(model, X, X0, on_sphere)
            check_finite(X.detach(), k, model)
            if hook is not None:
                new = first_call(f"hook ({callable_name(hook)})", own_hook, X, hook, k, X) if k == 1 else hook(k, X)
                if new is not None and (k == 1 or not torch.is_tensor(new) or new.shape != shape):
                    check_part_output(f"hook ({callable_name(hook)})", own_hook, new, X0, lambda: NonFiniteError(
                        f"non-finite {{what}} at layer {k}", likely_fields(model), "tokens"), unit=on_sphere)
                X = X if new is None else new
            keep(k, X)
            if capture:  # step 1 ran uncaptured: its checks, and the warm-up a capture needs
                X = _run_captured(model, X, dt, steps, generator, keep, lambda k: keep_stats(k) or keep_tokens(k), ticks)
                break
    if grad:
        return _tensors(X, records, stat_steps, snapshots, token_steps, dt, save)
    ds = _dataset(X, records, stat_steps, snapshots, token_steps, dt, save)
    ds.attrs.update(run_attrs(model, T=T, steps=steps, seed=seed, path=path, device=X0.device,
                              capture=("cuda_graph" if X0.is_cuda else "traced") if capture else None))
    return ds


def _first_step(model: Any, X: Any, X0: torch.Tensor, on_sphere: bool) -> None:
    """The first step's output: a user model's checked like any user callable; one of
    stochformer's own that leaves the sphere broke down numerically (a step too large for its
    parameters) or to non-finite numbers: `NonFiniteError` naming the likely cause."""
    own = _own(type(model))
    check_part_output(f"model.step ({callable_name(model)})", own, X, X0, lambda: NonFiniteError(
        "non-finite {what} at layer 1", likely_fields(model), "tokens"), unit=on_sphere and not own)
    off = rows_off_sphere(X) if on_sphere and own else None
    if off is not None:
        raise NonFiniteError(f"{{what}} left the sphere at layer 1 (rows of norm {off[0]:.3g} to {off[1]:.3g})",
                             likely_fields(model), "tokens")


#: steps per captured graph of ``solve(capture=True)``: a graph is captured once per run (its capture
#: runs the steps' Python once, as uncaptured steps do) and replayed for every ``CAPTURE_STEPS``
#: steps, so short graphs replayed many times should pay best; 4 is that reasoning, not yet timed on
#: a GPU. The steps before a record that do not fill one take a graph of their own length
CAPTURE_STEPS = 4
#: most steps between two reads of the captured graphs' flag (each read waits for the device):
#: what a non-finite state or a deferred branch makes a run compute again, uncaptured
CAPTURE_CHECK = 256


def _check_capture(model: Any, path: Optional[BrownianPath], hook: Optional[Hook], grad: bool) -> None:
    """``capture=True``'s refusals, before any work: each names what to change."""
    unsafe = unsafe_parts(model)
    if unsafe:
        raise ValueError(f"capture: {', '.join(unsafe)} cannot be captured (not capture_safe: Python state that "
                         "changes from step to step, or a host synchronisation); a Transformer of SoftmaxAttention "
                         "and RandomMLP(rng='torch') can, or give capture=False")
    if path is not None:
        raise ValueError("capture: a BrownianPath is read step by step in Python; give path=None or capture=False")
    if hook is not None:
        raise ValueError("capture: a hook runs Python after every step; give hook=None or capture=False")
    if grad:
        raise ValueError("capture: a captured run keeps no autograd graph; give X0 without requires_grad or capture=False")


def _run_captured(model: Any, X: torch.Tensor, dt: float, steps: int, generator: torch.Generator,
                  keep: Callable[[int, torch.Tensor], None], kept: Callable[[int], bool], ticks: Any) -> torch.Tensor:
    """Steps 2 … ``steps`` of `solve` from X (the state after step 1): from one kept step to the next
    (at most `CAPTURE_CHECK` steps apart), captured graphs of `CAPTURE_STEPS` steps (one graph per
    length, captured once) replayed without waiting for the device; their flag (a non-finite
    state, a deferred branch) is read at the segment's end, and if it is set the segment runs
    again, uncaptured and checked step by step, from the state and generator saved at its start.
    ``ticks`` advances by one per step (the progress bar)."""
    state = X.clone()
    flag = torch.zeros((), dtype=torch.bool, device=X.device)
    graphs: dict[int, Captured] = {}

    def region(n: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
        def fn(state: torch.Tensor, flag: torch.Tensor) -> None:
            with deferring() as flags:
                Y = state
                for _ in range(n):
                    Y = model.step(Y, dt, step_draws(generator, None, 0, steps))  # the step's index reads only a path
                    flags.append(~torch.isfinite(Y).all())
                state.copy_(Y)
                flag.copy_(torch.stack([flag, *flags]).any())
        return fn

    k = 1
    with torch.no_grad():
        while k < steps:
            end = k + 1
            while end < steps and end - k < CAPTURE_CHECK and not kept(end):
                end += 1
            start, before = state.clone(), generator.get_state()
            flag.zero_()
            for j in range(k, end, CAPTURE_STEPS):
                n = min(CAPTURE_STEPS, end - j)
                if n not in graphs:
                    graphs[n] = Captured(region(n), state, flag, generator)
                graphs[n].replay()
                for _ in range(n):
                    next(ticks)
            if bool(flag):  # undo, and run the steps uncaptured: the rare branch, or the error naming the step
                generator.set_state(before)
                Y = start
                for j in range(k + 1, end + 1):
                    Y = model.step(Y, dt, step_draws(generator, None, j - 1, steps))
                    check_finite(Y, j, model)
                state.copy_(Y)
            k = end
            if kept(k):
                keep(k, state.clone())
    next(ticks, None)  # the end of the progress bar
    return state


#: what the dataset's own variables and coordinates are (``long_name`` and ``units``, CF style:
#: xarray's ``.plot()`` labels its axes with them): the shared table of every dataset
#: (`NAMES`); cosines and energies are dimensionless ("1")
DESCRIPTIONS: dict[str, dict[str, str]] = NAMES


def _observables(save: SaveAt, X: torch.Tensor, first: Optional[dict[str, torch.Tensor]],
                 grad: bool = False) -> dict[str, torch.Tensor]:
    """``save.fn(X)``, checked: a mapping of identifiers (not reserved, not a statistic's) to
    tensors with the batch as leading dim, the same names and shapes as at the first record."""
    def where() -> str:  # named only when something is wrong: no formatting per record
        return f"SaveAt.fn ({callable_name(save.fn)})"

    out = save.fn(X)  # type: ignore[misc]
    if not isinstance(out, Mapping) or not out:
        raise ValueError(f"{where()}: must return a non-empty mapping of names to tensors (got {short(out)})")
    got = {}
    for name, value in out.items():
        if not (isinstance(name, str) and name.isidentifier()) or name in RESERVED or name in save.stats:
            raise ValueError(f"{where()}: {short(name)} is not a free variable name (an identifier other than "
                             f"{', '.join(sorted(RESERVED | set(save.stats)))})")
        if not torch.is_tensor(value) or value.dim() < 1 or value.shape[0] != X.shape[0]:
            raise ValueError(f"{where()}: {name!r} must be a tensor with the batch {X.shape[0]} as its leading dim "
                             f"(got {short(value)})")
        got[name] = value if grad else value.detach().cpu()
    dims = {f"{name}_{i}" for name, value in got.items() for i in range(value.dim() - 1)}
    if dims & set(got):
        raise ValueError(f"{where()}: {sorted(dims & set(got))} name both a variable and a dim of another (NAME_i)")
    if first is not None:
        want = {n: v.shape for n, v in first.items() if n not in save.stats}
        if {n: v.shape for n, v in got.items()} != want:
            raise ValueError(f"{where()}: returned {sorted(got)} with shapes {[tuple(v.shape) for v in got.values()]}, "
                             f"not the names and shapes of its first call")
    return got


def _tensors(X, records, stat_steps, snapshots, token_steps, dt, save: SaveAt) -> dict[str, torch.Tensor]:
    """`_dataset`'s variables and coordinates as tensors, graphs kept (``output="torch"``)."""
    device = X.device
    out: dict[str, torch.Tensor] = {"sample": torch.arange(X.shape[0], device=device)}
    if records:
        for name in records[0]:
            out[name] = torch.stack([r[name] for r in records], dim=1)  # (sample, time, …)
        out["time"] = torch.tensor(stat_steps, dtype=torch.float64, device=device) * dt
        out["step"] = torch.tensor(stat_steps, device=device)
    if snapshots:
        out["X"] = torch.stack(snapshots, dim=1)
        out["snapshot_time"] = torch.tensor(token_steps, dtype=torch.float64, device=device) * dt
        out["snapshot_step"] = torch.tensor(token_steps, device=device)
    if save.final:
        out["X_final"] = X
    # the dataset's index coordinates ([`describe`][stochformer.io.names.describe]): 0 … n−1 on every other dim
    index = {"token": X.shape[1], "dim": X.shape[2]} if snapshots or save.final else {}
    if snapshots:
        index["snapshot"] = len(snapshots)
    for name in records[0] if records else ():
        index.update({f"{name}_{i}": n for i, n in enumerate(out[name].shape[2:])})
    out.update({k: torch.arange(n, device=device) for k, n in index.items()})
    return out


def _dataset(X, records, stat_steps, snapshots, token_steps, dt, save: SaveAt) -> xr.Dataset:
    B, N, d = X.shape
    variables: dict[str, Any] = {}
    coords: dict[str, Any] = {"sample": np.arange(B)}
    if records:
        for name in records[0]:
            value = torch.stack([r[name] for r in records], dim=1).double().numpy()  # (sample, time, …)
            variables[name] = (("sample", "time", *(f"{name}_{i}" for i in range(value.ndim - 2))), value)
        coords["time"] = ("time", np.asarray(stat_steps) * dt)
        coords["step"] = ("time", np.asarray(stat_steps))
    if snapshots:
        variables["X"] = (("sample", "snapshot", "token", "dim"), torch.stack(snapshots, dim=1).double().numpy())
        coords["snapshot_time"] = ("snapshot", np.asarray(token_steps) * dt)
        coords["snapshot_step"] = ("snapshot", np.asarray(token_steps))
    if save.final:
        variables["X_final"] = (("sample", "token", "dim"), X.detach().cpu().double().numpy())
    ds = xr.Dataset(variables, coords=coords)
    if "energy" in ds:
        ds["energy"].attrs.update(long_name=f"interaction energy E_β (β = {save.energy_beta:g})", units="1")
    return describe_dataset(ds)


# --------------------------------------------------------------------------- metadata


def describe(obj: Any) -> Any:
    """A JSON-able description of a model part: its class and fields; tensors by shape;
    callables by ``module.name`` and their parameters (`callable_record`); any other object by its
    type and its repr, or its public attributes where the repr is the default one (`object_record`).
    Parts not defined by stochformer are listed by [`custom_parts`][stochformer.integrate.custom_parts].

    Parameters
    ----------
    obj : Any
        A model or a part of one (dataclass, tensor, number, string, sequence, callable).

    Returns
    -------
    dict, list, str, int, float, bool or None
        The description (never a memory address), recursively for a dataclass's fields.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {"type": part_name(type(obj))}
        for f in dataclasses.fields(obj):
            if f.name.startswith("_") or not f.repr:
                continue
            out[f.name] = describe(getattr(obj, f.name))
        return out
    if torch.is_tensor(obj):
        return {"tensor": list(obj.shape), "dtype": str(obj.dtype).removeprefix("torch.")}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [describe(v) for v in obj]
    if callable(obj):
        return callable_record(obj)
    return object_record(obj)


def custom_parts(obj: Any, where: str = "model") -> list[str]:
    """Where ``obj`` holds classes or callables that are not stochformer's own (user parts).

    Parameters
    ----------
    obj : Any
        A model or a part of one.
    where : str, optional
        The dotted name ``obj`` is reached by (the prefix of each entry).

    Returns
    -------
    list of str
        ``"where.field: module.name"`` for each user part (an activation in ``sf.ACTIVATIONS`` counts
        as stochformer's own).
    """
    out: list[str] = []
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if not _own(type(obj)):
            out.append(f"{where}: {part_name(type(obj))}")
        for f in dataclasses.fields(obj):
            if not f.name.startswith("_") and f.repr:
                out += custom_parts(getattr(obj, f.name), f"{where}.{f.name}")
    elif callable(obj) and not torch.is_tensor(obj) and not isinstance(obj, type):
        if not any(obj is fn for fn in ACTIVATIONS.values()) and not _own(obj):
            out.append(f"{where}: {part_name(obj)}")
    elif obj is not None and not isinstance(obj, (bool, int, float, str, list, tuple)) and not torch.is_tensor(obj):
        if not _own(type(obj)):
            out.append(f"{where}: {part_name(type(obj))}")
    return out


def _own(obj: Any) -> bool:
    return (getattr(obj, "__module__", "") or "").startswith("stochformer")




def run_attrs(model: Any, **extra: Any) -> dict[str, Any]:
    """Dataset attributes of a run: the model's description and custom parts, provenance
    (versions, device) and ``extra`` (T, steps, seed, path ...), as NetCDF-safe values.

    Parameters
    ----------
    model : Any
        The model run ([`describe`][stochformer.integrate.describe]).
    **extra : Any
        Further attributes; ``device`` and ``path`` are read, numbers are stored as numbers (a seed
        up to 2⁶⁴ − 1 as uint64) and None is left out.

    Returns
    -------
    dict
        ``model`` and ``custom_parts`` (JSON), ``path``, ``versions`` (JSON), ``device`` and ``extra``.
    """
    device = extra.pop("device", "cpu")
    path = extra.pop("path", None)
    prov = provenance(device)
    attrs = {
        "model": json.dumps(describe(model)),
        "custom_parts": json.dumps(custom_parts(model)),
        "path": repr(path) if path is not None else "none (normals from the generator)",
        "versions": json.dumps(prov),
        "device": prov["device"],
    }
    attrs.update(numeric_attrs(extra))  # numbers as numbers (a seed up to 2⁶⁴ − 1 as uint64); None left out
    return attrs
