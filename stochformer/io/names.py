"""The names of every dataset stochformer writes: one table, CF-style descriptions.

`NAMES` is the one naming scheme of the datasets of ``solve`` and of every command
(``simulate``, ``sync``, ``phase``, ``sweep``, ``converge``, ``chaos``, ``bridge``, ``spectrum``,
the experiments of the report's sections and the report): the same quantity or dim has the same name everywhere, with a ``long_name`` and
``units`` ("1" for a dimensionless number; times are in the units of the horizon T, rates per unit
of it). xarray's ``.plot()`` labels its axes with them. docs/datasets.md is this table
(``tests/test_datasets.py`` checks that the two agree).

[`describe`][stochformer.io.names.describe] gives every variable and coordinate of a dataset its description and every dim an
index coordinate; [`attr_value`][stochformer.io.names.attr_value] turns a Python value into a NetCDF attribute that reads back
as the same kind of value (numbers stay numbers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

#: one unit of time: t = k·T/steps is measured in the units the horizon T is given in
TIME_UNITS = "units of T"
#: a rate per unit time t (an exponent of e^{rate·t})
RATE_UNITS = "1/(units of T)"

#: the shared names: a quantity or a dim has this name (and description) in every dataset that holds it
NAMES: dict[str, dict[str, str]] = {
    # dims and their index coordinates
    "time": {"long_name": "time t = k T/steps", "units": TIME_UNITS},
    "step": {"long_name": "step (layer) k", "units": "1"},
    "sample": {"long_name": "independent sample", "units": "1"},
    "snapshot": {"long_name": "index of the kept token states", "units": "1"},
    "snapshot_time": {"long_name": "time t of the token states", "units": TIME_UNITS},
    "snapshot_step": {"long_name": "step (layer) of the token states", "units": "1"},
    "token": {"long_name": "token i", "units": "1"},
    "dim": {"long_name": "coordinate of a token in R^d", "units": "1"},
    "pair": {"long_name": "independent pair of tokens", "units": "1"},
    "point": {"long_name": "point of the sweep's table", "units": "1"},
    "exponent": {"long_name": "index i of the Lyapunov exponent λ_i", "units": "1"},
    "depth": {"long_name": "depth L (layers)", "units": "1"},
    "width": {"long_name": "MLP width m (inf: the limit field)", "units": "1"},
    "size": {"long_name": "number of tokens N", "units": "1"},
    # config fields, as sweep and phase axes
    "gamma": {"long_name": "attention V = γI: γ", "units": "1"},
    "beta": {"long_name": "attention QᵀK = βI: β", "units": "1"},
    "sigma_W": {"long_name": "std of the outer bias b_W", "units": "1"},
    "sigma_U": {"long_name": "std of the inner bias b_U", "units": "1"},
    "noise_scale": {"long_name": "overall scale s of the MLP", "units": "1"},
    "d": {"long_name": "token dimension d", "units": "1"},
    "N": {"long_name": "number of tokens N", "units": "1"},
    "L": {"long_name": "depth L (layers or SDE steps)", "units": "1"},
    "T": {"long_name": "time horizon T", "units": TIME_UNITS},
    "m": {"long_name": "MLP width m", "units": "1"},
    "energy_beta": {"long_name": "β of the energy E_β", "units": "1"},
    "sigma": {"long_name": "std σ = σ_U = σ_W of both biases", "units": "1"},
    "activation": {"long_name": "activation φ of the MLP", "units": "1"},
    # quantities
    "mean_cosine": {"long_name": "mean pairwise cosine ⟨x_i, x_j⟩", "units": "1"},
    "min_cosine": {"long_name": "least pairwise cosine", "units": "1"},
    "energy": {"long_name": "interaction energy E_β", "units": "1"},
    "X": {"long_name": "token states", "units": "1"},
    "X_final": {"long_name": "final token states", "units": "1"},
    "log_growth": {"long_name": "cumulative log-growth of a pair's separation", "units": "1"},
    "lambda_1": {"long_name": "top Lyapunov exponent λ_1", "units": RATE_UNITS},
    "lambda_1_pred": {"long_name": "predicted top Lyapunov exponent λ_1 − γ", "units": RATE_UNITS},
    "lambda_bar_pred": {"long_name": "predicted first-moment rate λ̄ − 2γ", "units": RATE_UNITS},
    "sync_fraction": {"long_name": "fraction of samples synchronised", "units": "1"},
}

#: how a derived name reads: ``<q>_mean``, ``<q>_se``, ``<q>_extrap_err`` of a quantity ``q`` of the table
SUFFIXES: dict[str, str] = {
    "_mean": "sample mean of {}",
    "_se": "standard error of {}",
    "_extrap_err": "Δt → 0 extrapolation error of {}",
}


def description(name: str, own: Mapping[str, Mapping[str, str]] = {}) -> Optional[dict[str, str]]:
    """``{"long_name", "units"}`` of ``name``: from ``own`` (a dataset's own names), then
    `NAMES`, then as a suffix of `SUFFIXES` on a name found so (``energy_near_se``:
    the standard error of ``energy_near``; an SE of a mean keeps the mean's units); None if unknown.

    Parameters
    ----------
    name : str
        A variable or coordinate name.
    own : mapping, optional
        A dataset's own names, looked up first.

    Returns
    -------
    dict or None
        ``{"long_name", "units"}``.
    """
    for table in (own, NAMES):
        if name in table:
            return dict(table[name])
    for suffix, text in SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            base = description(name[: -len(suffix)], own)
            if base is not None:
                return {"long_name": text.format(base["long_name"]), "units": base["units"]}
    return None


def axis_description(field: str, model: Any = None) -> dict[str, str]:
    """The description of a config field used as an axis (a sweep's or the phase diagram's): from
    `NAMES`, else the field's own description in ``model`` (a pydantic model class, e.g.
    [`RunConfig`][stochformer.config.RunConfig]; a dotted name ``init.spread`` by its last part), else
    "config field <name>"; units "1" unless the table says otherwise.

    Parameters
    ----------
    field : str
        The config field (dotted for a nested one).
    model : type of pydantic.BaseModel, optional
        The config class it belongs to.

    Returns
    -------
    dict
        ``{"long_name", "units"}``.
    """
    if field in NAMES:
        return dict(NAMES[field])
    last = field.rsplit(".", 1)[-1]
    info = getattr(model, "model_fields", {}).get(last)
    text = getattr(info, "description", None)
    return {"long_name": f"{field}: {text}" if text else f"config field {field}", "units": "1"}


def describe(ds: Any, own: Mapping[str, Mapping[str, str]] = {}) -> Any:
    """``ds`` (an ``xarray.Dataset``, changed in place and returned) with an index coordinate
    ``0 … n−1`` on every dim that has none, and ``long_name`` / ``units`` (CF style) on every
    variable and coordinate that has none yet, from [`description`][stochformer.io.names.description] (``own`` first). A name
    found nowhere is left without (``tests/test_datasets.py`` fails on it).

    Parameters
    ----------
    ds : xarray.Dataset
        The data.
    own : mapping, optional
        The dataset's own names, looked up first.

    Returns
    -------
    xarray.Dataset
        ``ds``.
    """
    for dim, size in ds.sizes.items():
        if dim not in ds.coords:
            ds.coords[dim] = np.arange(size)
    for name in ds.variables:
        attrs = ds[name].attrs
        if attrs.get("long_name") and attrs.get("units"):
            continue
        found = description(str(name), own)
        if found is not None:
            attrs.update(found)
    return ds


def attr_value(value: Any) -> Any:
    """A NetCDF attribute for ``value``, read back as the same kind of value: a number as a number
    (an integer as int64, or uint64 above 2⁶³ − 1: seeds reach 2⁶⁴ − 1; a bool as 0 or 1), a string
    as itself, a list of numbers as an array, anything else (a dict, a nested list) as its JSON
    text. None has no attribute: return None and leave the attribute out.

    Parameters
    ----------
    value : Any
        A value of a run record.

    Returns
    -------
    Any
        The attribute, or None to leave it out.
    """
    if value is None or isinstance(value, (str, float, np.floating)):
        return value
    if isinstance(value, (bool, np.bool_)):
        return np.int8(bool(value))
    if isinstance(value, (int, np.integer)):
        return np.uint64(value) if value > np.iinfo(np.int64).max else np.int64(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        return np.asarray(value)
    return json.dumps(value, default=str)


def numeric_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``attrs`` as NetCDF attributes ([`attr_value`][stochformer.io.names.attr_value]), the None ones left out.

    Parameters
    ----------
    attrs : mapping
        Name → value.

    Returns
    -------
    dict
        Name → NetCDF attribute.
    """
    out = {k: attr_value(v) for k, v in attrs.items()}
    return {k: v for k, v in out.items() if v is not None}
