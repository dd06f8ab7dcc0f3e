"""stochformer: deep transformers at random initialisation as interacting particle systems.

The library, in one example (``docs/api.md``)::

    import torch
    import stochformer as sf

    model = sf.Transformer(attention=sf.SoftmaxAttention(beta=1.0, gamma=1.0),
                           mlp=sf.RandomMLP(width=256, activation=torch.tanh, sigma_U=0.1))
    X0 = sf.sphere.uniform(batch=16, N=64, d=4, seed=0)
    out = sf.solve(model, X0, T=5.0, steps=150, save=sf.SaveAt(every=5), seed=0)
    out.mean_cosine.mean("sample").plot()

The same :func:`solve` runs the limit SDE (:class:`LimitSDE`) and the mean-field particles; a
:class:`BrownianPath` shared by several calls couples them. See SPEC.md for the science and
``docs/architecture.md`` for how the modules fit together.
"""

__version__ = "0.1.0"

from . import sphere  # noqa: E402
from .brownian import BrownianPath, Draws  # noqa: E402
from .model import (  # noqa: E402
    ACTIVATIONS,
    Attention,
    EulerMaruyama,
    ExactField,
    LimitSDE,
    NoiseKernel,
    NoiseSource,
    RandomFeatureField,
    RandomMLP,
    SoftmaxAttention,
    StratonovichHeun,
    Transformer,
    rates,
)
from .results import load  # noqa: E402
from .solve import Model, SaveAt, solve  # noqa: E402

__all__ = [
    "ACTIVATIONS", "Attention", "BrownianPath", "Draws", "EulerMaruyama", "ExactField", "LimitSDE", "Model",
    "NoiseKernel", "NoiseSource", "RandomFeatureField", "RandomMLP", "SaveAt", "SoftmaxAttention",
    "StratonovichHeun", "Transformer", "load", "rates", "solve", "sphere",
]
