"""Optional dependencies and the one message that names the extra to install.

``pip install 'stochformer[ot]'`` adds POT (exact and sliced W₂, the ``chaos`` study);
``pip install 'stochformer[cluster]'`` adds Dask (``--local-cluster``, ``--scheduler local-cluster:N``
or a scheduler address); ``pip install 'stochformer[interop]'`` adds torchsde ([`stochformer.interop`][stochformer.interop]);
``stochformer[all]`` adds all three.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: module → (extra, distribution) for every optional import of the package
OPTIONAL = {"ot": ("ot", "POT"), "distributed": ("cluster", "dask[distributed]"), "torchsde": ("interop", "torchsde")}


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message names the extra that provides it."""


def require(module: str, feature: str) -> ModuleType:
    """Import the optional ``module`` (a key of `OPTIONAL`) needed by ``feature``, or raise
    [`MissingExtraError`][stochformer.core.extras.MissingExtraError] saying which extra to install.

    Parameters
    ----------
    module : str
        The optional module's name.
    feature : str
        What needs it, for the message.

    Returns
    -------
    types.ModuleType
        The module.
    """
    extra, dist = OPTIONAL[module]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{feature} needs {dist}, which is not installed: "
            f"install the extra stochformer[{extra}] (or stochformer[all]): python -m pip install '.[{extra}]' "
            "in the source tree"
        ) from exc
