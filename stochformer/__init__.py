"""stochformer: deep transformers at random initialisation as interacting particle systems.

The library, in one example (``docs/api.md``):

```python
import torch
import stochformer as sf

model = sf.Transformer(attention=sf.SoftmaxAttention(beta=1.0, gamma=1.0),
                       noise=sf.RandomMLP(width=256, activation=torch.tanh, sigma_U=0.1))
X0 = sf.sphere.uniform(batch=16, N=64, d=4, seed=0)
out = sf.solve(model, X0, T=5.0, steps=150, save=sf.SaveAt(every=5), seed=0)
out.mean_cosine.mean("sample").plot()
```

The same [`solve`][stochformer.solve] runs the limit SDE ([`LimitSDE`][stochformer.LimitSDE]) and the mean-field particles; a
[`BrownianPath`][stochformer.BrownianPath] shared by several calls couples them. See SPEC.md for the science and
``docs/architecture.md`` for how the modules fit together.
"""

from .core.version import __version__

import importlib as _importlib
import os as _os
import sys as _sys
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:  # what the names below resolve to, for type checkers and IDEs (imported lazily at run time)
    from .core import sphere
    from .core.brownian import BrownianPath, Draws
    from .core.progress import ProgressMeter
    from .integrate import Model, SaveAt, solve
    from .io.results import load
    from .model import (
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

#: OpenMP settings applied when stochformer is imported before torch (always, through the CLI),
#: unless the variable is already set or STOCHFORMER_OMP=keep: torch's threads then sleep as soon
#: as a parallel region ends instead of spinning, so on a machine whose cores are busy with other
#: work a run slows by about its share instead of many-fold (docs/performance.md, "A shared machine")
OMP_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}
if _os.environ.get("STOCHFORMER_OMP") != "keep" and "torch" not in _sys.modules:
    for _key, _value in OMP_DEFAULTS.items():
        _os.environ.setdefault(_key, _value)

#: the public names and the modules they live in, imported on first use (``import stochformer``
#: and the command line's ``--help`` stay free of torch)
_WHERE = {
    "sphere": None, "BrownianPath": "core.brownian", "Draws": "core.brownian", "load": "io.results",
    "ProgressMeter": "core.progress",
    "Model": "integrate", "SaveAt": "integrate", "solve": "integrate",
    **{name: "model" for name in ("ACTIVATIONS", "Attention", "EulerMaruyama", "ExactField", "LimitSDE", "NoiseKernel",
                                   "NoiseSource", "RandomFeatureField", "RandomMLP", "SoftmaxAttention",
                                   "StratonovichHeun", "Transformer", "rates")},
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _WHERE[name] is None:  # a module of the ground layer
        return _importlib.import_module(f"{__name__}.core.{name}")
    return getattr(_importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    """The public names: the lazily imported API, the version and the OpenMP defaults (no helpers, and
    no subpackage that an import has bound to the package, such as ``core``)."""
    return sorted({"__version__", *__all__}
                  | {n for n, v in globals().items() if not n.startswith("_") and not isinstance(v, _ModuleType)})
