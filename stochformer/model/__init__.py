"""What evolves: the model pieces. They take tensors and numbers, never a config.

- [`activations`][stochformer.model.activations]: φ by name or any callable; [`kernel`][stochformer.model.kernel]: κ and the rates of SPEC §2, §5;
- [`attention`][stochformer.model.attention]: the [`Attention`][stochformer.model.Attention] protocol and [`SoftmaxAttention`][stochformer.model.SoftmaxAttention];
- [`noise`][stochformer.model.noise]: the [`NoiseSource`][stochformer.model.NoiseSource] protocol, [`RandomMLP`][stochformer.model.RandomMLP], [`ExactField`][stochformer.model.ExactField],
  [`RandomFeatureField`][stochformer.model.RandomFeatureField] (normals through [`rng`][stochformer.model.rng]);
- [`transformer`][stochformer.model.transformer]: [`Transformer`][stochformer.model.Transformer], the discrete model (SPEC §1);
- [`sde`][stochformer.model.sde]: [`LimitSDE`][stochformer.model.LimitSDE] and its integrators (SPEC §3); with a random-feature field and
  chunked attention it is also the mean-field particle system (SPEC §4).
"""

from .activations import ACTIVATIONS, Activation
from .attention import Attention, SoftmaxAttention
from .kernel import NoiseKernel, Rates, rates
from .noise import ExactField, NoiseSource, RandomFeatureField, RandomMLP
from .sde import INTEGRATORS, EulerMaruyama, Integrator, LimitSDE, StratonovichHeun
from .transformer import Transformer

__all__ = [
    "ACTIVATIONS", "Activation", "Attention", "EulerMaruyama", "ExactField", "INTEGRATORS", "Integrator", "LimitSDE",
    "NoiseKernel", "NoiseSource", "RandomFeatureField", "RandomMLP", "Rates", "SoftmaxAttention", "StratonovichHeun",
    "Transformer", "rates",
]
