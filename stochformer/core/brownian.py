"""The random driver of a run: one Brownian path shared by every system that should feel it.

A [`BrownianPath`][stochformer.core.brownian.BrownianPath] is the sequence of i.i.d. N(0, 1) normals ``Ξ_s`` (each of ``shape``, or
one tensor per part when ``shape`` is a list of shapes: a random-feature field's B^k and B⁰) on
a fine grid of ``steps`` steps of [0, T]. A solver with ``n`` steps (``n`` dividing ``steps``)
asks for the normals of its step ``k``: the normalised sum ``q^{−1/2} Σ Ξ_s`` over the
``q = steps/n`` fine steps inside it, i.e. the same path seen on a coarser grid (SPEC §3,
"Measuring it"). Couplings are therefore one object handed to several [`stochformer.solve`][stochformer.solve]
calls: the transformer and the limit SDE (Theorem 1.1), systems of N and N_ref tokens driven by
one random-feature field (Proposition 1.2), Δt and Δt/2 (strong order).

The normals are drawn on demand, one fine step at a time, from a generator seeded once: a
consumer that goes back in time replays the stream from its start, so the path is a function of
the seed alone and never held in memory whole. The last coarse grid asked for is cached (a few
transformer widths read the same layer normals).

[`Draws`][stochformer.core.brownian.Draws] is what a noise source receives at one step: the run's ``generator`` for draws that
are not part of the path (MLP weights, random features), and [`Draws.brownian`][stochformer.core.brownian.Draws.brownian], the step's
Brownian normals: from the path if there is one, else fresh from the generator. A random part that
must not move the run's generator (a random attention) draws from the run's stream of its own name,
[`Draws.stream`][stochformer.core.brownian.Draws.stream], derived from the run's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Callable, Optional, Union

import torch

from .runtime import stream
from .validation import RealTensor, DeviceLike, FloatDtype, NonNegativeInt, PositiveInt, Seed, Shape, check_memory, same_device, validated


#: a sampler of fresh normals: (n, generator, dtype, device) → n i.i.d. N(0, 1) numbers, shape (n,)
Sampler = Callable[[int, torch.Generator, torch.dtype, Union[str, torch.device]], torch.Tensor]


@validated
class BrownianPath:
    r"""A Brownian path: i.i.d. $\mathcal N(0, 1)$ normals $\Xi_s$ of ``shape`` on ``steps`` fine steps.

    A solver with n steps (n dividing ``steps``) receives at its step k the normals of the same path
    on the coarser grid,

    $$
    \xi_k = q^{-1/2} \sum_{s = kq}^{(k+1)q - 1} \Xi_s, \qquad q = \text{steps}/n,
    $$

    so one path handed to several [`solve`][stochformer.integrate.solve] calls couples them (see the
    module docstring).

    Parameters
    ----------
    shape : tuple of int or list of tuple of int
        The shape of one fine step's normals, or a list of shapes (parts drawn in this order at
        every fine step, e.g. a random-feature field's $B^k$ and $B^0$).
    steps : int
        The number of fine steps, >= 1.
    seed : int, optional
        The seed of the path's generator.
    generator : torch.Generator, optional
        In place of ``seed``: the generator the normals are drawn from.
    dtype : torch.dtype, optional
        float32 or float64 (the default).
    device : str or torch.device, optional
        Where the normals are drawn.
    normals : torch.Tensor, shape (steps, \*shape), optional
        An explicit path instead of drawing one (the path then has its dtype and device).

    Raises
    ------
    ValueError
        An argument out of range (naming it), a path too large for the memory, or explicit
        normals for a path of several parts.

    Examples
    --------
    >>> import torch
    >>> from stochformer import BrownianPath
    >>> path = BrownianPath((2, 4, 3), steps=8, seed=0)
    >>> coarse = path.increment(0, 2)[0]          # step 0 of a 2-step solver: 4 fine steps
    >>> fine = torch.stack([path.increment(s, 8)[0] for s in range(4)])
    >>> torch.allclose(coarse, fine.sum(0) / 2)
    True
    """

    def __init__(
        self,
        shape: Annotated[Union[tuple[int, ...], list[tuple[int, ...]]], Shape(parts=True)],
        steps: PositiveInt,
        seed: Optional[Seed] = None,
        generator: Optional[torch.Generator] = None,
        dtype: FloatDtype = torch.float64,
        device: DeviceLike = "cpu",
        normals: Optional[RealTensor] = None,
    ):
        self.parts = [tuple(p) for p in shape] if isinstance(shape, list) else [tuple(shape)]
        check_memory("shape", 4.0 * sum(math.prod(p) for p in self.parts) * torch.empty(0, dtype=dtype).element_size())
        self.shape = self.parts[0] if len(self.parts) == 1 else self.parts
        self.steps, self.dtype, self.device = int(steps), dtype, torch.device(device)
        self._given = normals
        if normals is not None:  # the path lives where its normals are
            self.dtype, self.device = normals.dtype, normals.device
            if len(self.parts) > 1:
                raise ValueError(f"normals: a path of several parts ({self.parts}) cannot be given as one tensor")
            if tuple(normals.shape) != (self.steps, *self.shape):
                raise ValueError(f"normals: expected shape {(self.steps, *self.shape)}, got {tuple(normals.shape)}")
            self._gen = None
        else:
            if generator is not None and not same_device(generator.device, self.device):
                raise ValueError(f"generator: is on {generator.device}, the path on {self.device}; give them the same device")
            if generator is None:
                if seed is None:
                    raise ValueError("BrownianPath: give a seed or a generator")
                generator = torch.Generator(device=self.device).manual_seed(int(seed))
            self._gen = generator
            self._start = generator.get_state()
        self._cursor = 0  # fine steps drawn from the generator since its start state
        self._cache: tuple[int, list[list[torch.Tensor]]] = (0, [])
        # the step served last, (n, k, normals): several models stepped in lockstep read each step
        # in turn, and past the cache a second read of step k would replay the stream from its start
        self._last: Optional[tuple[int, int, list[torch.Tensor]]] = None

    @classmethod
    def from_normals(cls, normals: torch.Tensor) -> "BrownianPath":
        """The path whose fine normals are given.

        Parameters
        ----------
        normals : torch.Tensor, shape (steps, *shape)
            The i.i.d. N(0, 1) normals of each fine step (e.g. a torchsde or diffrax path's
            increments divided by √Δt).

        Returns
        -------
        BrownianPath
            A path of ``steps`` fine steps and that ``shape``, which reads ``normals`` as they are.
        """
        return cls(tuple(normals.shape[1:]), normals.shape[0], normals=normals)

    def _fine(self, s: int) -> list[torch.Tensor]:
        if self._given is not None:
            return [self._given[s]]
        assert self._gen is not None, "BrownianPath: a path without given normals has a generator"
        if s < self._cursor:  # replay the stream from its start
            self._gen.set_state(self._start)
            self._cursor = 0
        while True:
            z = [torch.randn(p, generator=self._gen, dtype=self.dtype, device=self.device) for p in self.parts]
            self._cursor += 1
            if self._cursor > s:
                return z

    def increment(self, k: int, n: int) -> list[torch.Tensor]:
        r"""The normals of step ``k`` of ``n`` equal steps, one tensor per part: with
        $q$ = ``steps``/n fine steps in each,

        $$
        \Xi^{(n)}_k = q^{-1/2} \sum_{s = kq}^{(k+1)q - 1} \Xi_s ,
        $$

        again i.i.d. $\mathcal N(0, 1)$, so that $\sqrt{T/n}\,\Xi^{(n)}_k$ is the Brownian increment
        over the step whatever n (the coupling of step sizes).

        Parameters
        ----------
        k : int
            The step, in 0..n−1.
        n : int
            The number of steps, a divisor of the path's fine ``steps``.

        Returns
        -------
        list of torch.Tensor
            One tensor per part, of the part's shape.

        Raises
        ------
        ValueError
            If n does not divide ``steps`` or k is out of range.
        """
        if n < 1 or self.steps % n:
            raise ValueError(f"BrownianPath: {n} steps do not divide the path's {self.steps} fine steps")
        if not 0 <= k < n:
            raise ValueError(f"BrownianPath: step {k} outside 0..{n - 1}")
        q = self.steps // n
        cached_n, values = self._cache
        if cached_n == n and k < len(values):
            return values[k]
        if self._last is not None and self._last[:2] == (n, k):
            return self._last[2]
        z = self._fine(k * q)
        for j in range(1, q):
            z = [a + b for a, b in zip(z, self._fine(k * q + j))]
        z = [a / math.sqrt(q) for a in z] if q > 1 else z
        if cached_n != n:
            values = []
        if len(values) == k and n * sum(math.prod(p) for p in self.parts) <= _CACHE_ENTRIES:
            values.append(z)
            self._cache = (n, values)
        self._last = (n, k, z)
        return z

    def __repr__(self) -> str:
        return f"BrownianPath(shape={self.shape}, steps={self.steps})"


#: the largest coarse grid (entries in all) that a path keeps in memory: 2²² (32 MiB in float64)
_CACHE_ENTRIES = 1 << 22


@validated
@dataclass
class Draws:
    """The randomness of one step ``k`` of ``n``, what a noise source receives.

    Parameters
    ----------
    generator : torch.Generator
        For draws outside the Brownian path (weights, features).
    path : BrownianPath, optional
        The run's path; [`brownian`][stochformer.core.brownian.Draws.brownian] serves its normals of
        this step (a path of several parts serves them in order, one per call). None: fresh normals
        from ``generator``.
    k : int, optional
        The step, 0 <= k < n.
    n : int, optional
        The number of steps of the run, >= 1.

    Raises
    ------
    ValueError
        ``k`` not below ``n``, naming ``k``.

    Examples
    --------
    >>> import torch
    >>> from stochformer import Draws
    >>> draws = Draws(torch.Generator().manual_seed(0), k=0, n=10)
    >>> draws.brownian((2, 3), torch.float64, "cpu").shape
    torch.Size([2, 3])
    """

    generator: torch.Generator
    path: Optional[BrownianPath] = None
    k: NonNegativeInt = 0
    n: PositiveInt = 1
    _part: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.k >= self.n:
            raise ValueError(f"k: must be < n = {self.n} (got {self.k})")

    def brownian(
        self, shape: tuple[int, ...], dtype: torch.dtype, device: Union[str, torch.device], sampler: Optional[Sampler] = None,
    ) -> torch.Tensor:
        """N(0, 1) normals driving the Brownian part of this step: the path's next part, or fresh
        from the generator without a path (by ``sampler`` when given, else ``torch.randn``).

        Parameters
        ----------
        shape : tuple of int
            The shape the noise source needs. A path's part may differ from it in the leading axis
            where the two broadcast (equal, or either of them 1).
        dtype : torch.dtype
            The dtype of the normals returned.
        device : str or torch.device
            Their device.
        sampler : callable, optional
            ``sampler(n, generator, dtype, device)`` → n i.i.d. N(0, 1) numbers, shape (n,), drawn
            from the run's generator (a [`NormalDraws`][stochformer.model.rng.NormalDraws]): draws
            the fresh normals; unused with a path (its normals are the path's).

        Returns
        -------
        torch.Tensor
            Standard normals of ``shape`` (of the path's part's shape with a path).

        Raises
        ------
        ValueError
            Naming the path, where its next part does not fit ``shape``.
        """
        if self.path is None:
            if sampler is not None:
                return sampler(math.prod(shape), self.generator, dtype, device).view(shape)
            return torch.randn(*shape, generator=self.generator, dtype=dtype, device=device)
        parts = self.path.parts
        if (self._part >= len(parts) or tuple(shape)[1:] != parts[self._part][1:]
                or not _broadcasts(parts[self._part][0], shape[0])):
            raise ValueError(f"BrownianPath: the noise source needs normals of shape {tuple(shape)} (part "
                             f"{self._part}); the path has parts {parts}")
        z = self.path.increment(self.k, self.n)[self._part]
        self._part += 1
        return z.to(dtype=dtype, device=device)

    def stream(self, name: str) -> torch.Generator:
        """The run's stream of its random part ``name``, beside ``generator`` (drawing from it does
        not move the generator): [`stochformer.core.runtime.stream`][stochformer.core.runtime.stream].

        Parameters
        ----------
        name : str
            The part, e.g. ``"attention"``.

        Returns
        -------
        torch.Generator
            A fresh generator, the same for the same run seed and name.
        """
        return stream(self.generator, name)

    @property
    def coupled(self) -> bool:
        """Whether the Brownian normals come from a given path."""
        return self.path is not None


def _broadcasts(a: int, b: int) -> bool:
    """Whether leading axes of lengths ``a`` and ``b`` broadcast (equal, or one of them 1)."""
    return a == b or 1 in (a, b)


def step_draws(generator: torch.Generator, path: Optional[BrownianPath], k: int, n: int) -> Draws:
    """The [`Draws`][stochformer.core.brownian.Draws] of step k of n from arguments already checked
    ([`solve`][stochformer.solve] makes one per step: the constructor's checks would cost a few µs
    each).

    Parameters
    ----------
    generator : torch.Generator
        The run's generator.
    path : BrownianPath or None
        The shared Brownian path, if any.
    k : int
        The step, in 0..n−1.
    n : int
        The number of steps of the run.

    Returns
    -------
    Draws
        The randomness of the step.
    """
    draws = Draws.__new__(Draws)
    Draws.__init__.__wrapped__(draws, generator, path, k, n)  # type: ignore[attr-defined]  # set by @validated's functools.wraps
    return draws


def as_draws(rng: Union[torch.Generator, Draws]) -> Draws:
    """The randomness of a step, from a bare generator (no path) or as it is.

    Parameters
    ----------
    rng : torch.Generator or Draws
        What a noise source was given.

    Returns
    -------
    Draws
        ``rng`` itself, or the draws of one step from the generator without a path.
    """
    return rng if isinstance(rng, Draws) else Draws(rng)
