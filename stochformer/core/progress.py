"""Progress bars and the package's logger.

Progress bars: tqdm's notebook widget in Jupyter when ipywidgets is installed, its text bar
everywhere else (so a notebook without ipywidgets shows a text bar instead of tqdm's "IProgress not
found" warning). A bar asked for (``progress=True``) is drawn only when its stream (stderr by
default) is a terminal, or in a Jupyter kernel: written to a file or a pipe, its carriage-return
frames would fill the log.
`set_progress` (``--progress`` on the command line) or the environment variable
``STOCHFORMER_PROGRESS`` (``always``, ``never`` or ``auto``) overrides that: ``always`` draws every
bar asked for, ``never`` none.

Messages: the ``stochformer`` logger (`logger`, `get_logger` for its children); the
library adds no handler of its own beyond a ``NullHandler``, the command line attaches one to stderr
(`configure_logging`: ``--quiet`` warnings only, ``--verbose`` debug).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Literal, Optional, TypeVar

if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm as _base
else:
    from tqdm.std import tqdm as _base

__all__ = ["tqdm", "ProgressMeter", "logger", "get_logger", "configure_logging", "set_progress", "progress_mode", "PROGRESS_ENV"]

#: the environment variable that overrides where progress bars are drawn: always, never or auto
PROGRESS_ENV = "STOCHFORMER_PROGRESS"
ProgressMode = Literal["auto", "always", "never"]
_MODES = ("auto", "always", "never")
_mode: Optional[ProgressMode] = None

#: the package's logger; every module logs through it or a child (``get_logger(__name__)``)
logger = logging.getLogger("stochformer")
logger.addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (a child of ``stochformer`` for the package's modules)."""
    return logging.getLogger(name if name == "stochformer" or name.startswith("stochformer.") else f"stochformer.{name}")


def set_progress(mode: Optional[ProgressMode]) -> None:
    """Where progress bars are drawn from now on: ``auto`` (only on a terminal or in a notebook),
    ``always``, ``never``; ``None`` returns to the environment variable `PROGRESS_ENV` (else auto)."""
    global _mode
    if mode is not None and mode not in _MODES:
        raise ValueError(f"progress: must be one of {', '.join(_MODES)} (got {mode!r})")
    _mode = mode


def progress_mode() -> ProgressMode:
    """The mode in force: `set_progress`'s, else `PROGRESS_ENV`'s (an unknown value is
    ``auto``), else ``auto``."""
    if _mode is not None:
        return _mode
    env = os.environ.get(PROGRESS_ENV, "auto").strip().lower()
    return env if env in _MODES else "auto"  # type: ignore[return-value]


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _notebook() -> bool:
    """In a Jupyter kernel (the widget, or the text bar, which the cell's output area redraws)."""
    return _base.__module__ == "tqdm.notebook" or "ipykernel" in sys.modules


class tqdm(_base):
    """tqdm whose bar, when asked for (``disable=False``), is drawn only where it can be read:
    a terminal, a notebook widget, or anywhere under ``always`` (see `set_progress`)."""

    def __init__(self, *args: Any, disable: Optional[bool] = False, **kwargs: Any) -> None:
        if not disable:
            mode = progress_mode()
            shown = mode == "always" or (mode == "auto" and (_notebook() or _is_terminal(kwargs.get("file") or sys.stderr)))
            disable = not shown
        super().__init__(*args, disable=disable, **kwargs)


T = TypeVar("T")


@dataclass(frozen=True)
class ProgressMeter:
    """How a run shows its progress (diffrax's ``progress_meter``): a `tqdm` bar over the steps,
    labelled ``desc``, erased when the run ends, drawn where `set_progress` allows.

    Parameters
    ----------
    desc : str, optional
        The bar's label.

    Examples
    --------
    >>> import stochformer as sf
    >>> X0 = sf.sphere.uniform(batch=1, N=2, d=3, seed=0)
    >>> out = sf.solve(sf.Transformer(), X0, T=1.0, steps=3, seed=0, progress=sf.ProgressMeter("layers"))
    """

    desc: str = "steps"

    def track(self, steps: Iterable[T]) -> Iterator[T]:
        """``steps``, counted on the bar as they are taken.

        Parameters
        ----------
        steps : iterable
            What the loop steps through.

        Returns
        -------
        iterator
            The same items, in order.
        """
        return iter(tqdm(steps, desc=self.desc, leave=False, mininterval=0.5))


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted (a captured stderr too)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


_handler: Optional[logging.Handler] = None


def configure_logging(verbosity: int = 0) -> logging.Logger:
    """Attach one stderr handler to the ``stochformer`` logger (once; later calls change its level):
    ``verbosity`` < 0 warnings and errors only, 0 info, > 0 debug. Messages read ``LEVEL: text``
    below warnings' level too, without time stamps: the command line's own output stays on stdout."""
    global _handler
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 else logging.DEBUG
    if _handler is None:
        _handler = _Stderr()
        _handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        logger.addHandler(_handler)
    logger.setLevel(level)
    _handler.setLevel(level)
    return logger
