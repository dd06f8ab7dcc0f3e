"""Every public callable of the API reference says what it takes and what it gives, in the numpydoc
layout the site renders (mkdocs.yml: ``docstring_style: numpy``).

The API is ``stochformer.__all__`` and every module the documentation renders with ``::: module``
(docs/**/*.md). Its public members are a module's ``__all__`` or, without one, the functions and
classes it defines under a name without a leading underscore; of a class, the functions it defines
itself (properties are attributes). A member documents

* a ``Parameters`` section where it takes any (besides ``self``/``cls``, ``*args``/``**kwargs``);
  a class documents its constructor's there (or, a dataclass or named tuple, its fields under
  ``Attributes``); a pydantic model is exempt, its fields are listed from their descriptions
  (griffe-pydantic), and so is a protocol class, which has no constructor of its own;
* a ``Returns`` (or ``Yields``) section where its return annotation is not ``None``.

``inspect.getdoc`` is the docstring read, so a method that overrides a documented method of a base
class without a docstring of its own inherits the base's (a result's ``to_dict``, ``names``), as
the reader of ``help()`` sees it.
"""

from __future__ import annotations

import dataclasses
import inspect
import pkgutil
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import pydantic
import pytest

ROOT = Path(__file__).resolve().parent.parent


def documented_modules() -> list[str]:
    """The modules the site renders (``::: name`` in docs/**/*.md), in a stable order."""
    names = {m for page in ROOT.joinpath("docs").rglob("*.md")
             for m in re.findall(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.M)}
    return sorted(names)


def section(doc: str, title: str) -> bool:
    """Whether ``doc`` has the numpydoc section ``title`` (the title underlined by as many dashes)."""
    return re.search(rf"^\s*{title}\n\s*-{{{len(title)}}}\s*$", doc, re.M) is not None


def _parameters(obj: Callable[..., Any]) -> list[str] | None:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    return [p.name for p in signature.parameters.values()
            if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _returns(obj: Callable[..., Any]) -> bool:
    annotation = inspect.signature(obj).return_annotation
    return annotation not in (None, "None", inspect.Signature.empty)


def gaps(qualname: str, obj: Any) -> Iterator[str]:
    """The sections ``obj`` lacks, as ``"qualname: Section"`` (none for a complete docstring)."""
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj):
        if issubclass(obj, pydantic.BaseModel) or getattr(obj, "_is_protocol", False):
            return
        record = dataclasses.is_dataclass(obj) or (issubclass(obj, tuple) and hasattr(obj, "_fields"))
        if _parameters(obj) and not (section(doc, "Parameters") or (record and section(doc, "Attributes"))):
            yield f"{qualname}: Parameters"
        return
    if _parameters(obj) and not section(doc, "Parameters"):
        yield f"{qualname}: Parameters"
    if _parameters(obj) is not None and _returns(obj) and not (section(doc, "Returns") or section(doc, "Yields")):
        yield f"{qualname}: Returns"


def members(module_name: str) -> Iterator[tuple[str, Any]]:
    """The public functions and classes of a module (or the one object a page renders by its dotted
    name) and the functions its public classes define."""
    target = pkgutil.resolve_name(module_name)
    if inspect.ismodule(target):
        names = getattr(target, "__all__", None) or [
            n for n, o in vars(target).items()
            if not n.startswith("_") and (inspect.isfunction(o) or inspect.isclass(o)) and o.__module__ == module_name]
        objects = [(f"{module_name}.{name}", getattr(target, name)) for name in names]
    else:
        objects = [(module_name, target)]
    for qualname, obj in objects:
        if inspect.ismodule(obj) or not callable(obj):
            continue
        yield qualname, obj
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
                if inspect.isfunction(function):
                    yield f"{qualname}.{attr}", getattr(obj, attr)


def module_gaps(module_name: str) -> list[str]:
    return [gap for qualname, obj in members(module_name) for gap in gaps(qualname, obj)]


def test_the_walk_sees_the_api():
    modules = documented_modules()
    assert "stochformer.integrate" in modules and "stochformer.interop" in modules and len(modules) > 40
    walked = {q for m in modules for q, _ in members(m)}
    import stochformer

    for name in stochformer.__all__:  # every name of the top level is walked in the module it lives in
        obj = getattr(stochformer, name)
        if callable(obj) and not inspect.ismodule(obj):
            assert f"{obj.__module__}.{obj.__qualname__}" in walked, name


def test_the_rule_finds_a_missing_section():
    """Fault injection: a function without Parameters or Returns, a class without Parameters and a
    method of a class are each flagged; a complete docstring, a procedure without Returns, a
    pydantic model and a dataclass with Attributes are not."""

    def bare(x: int) -> int:
        """Twice x."""
        return 2 * x

    def full(x: int) -> int:
        """Twice x.

        Parameters
        ----------
        x : int
            A number.

        Returns
        -------
        int
            2x.
        """
        return 2 * x

    def procedure() -> None:
        """Nothing in, nothing out."""

    class Plain:
        """A class."""

        def __init__(self, a: int) -> None:
            self.a = a

    @dataclasses.dataclass
    class Record:
        """A record.

        Attributes
        ----------
        a : int
            A number.
        """

        a: int

    class Model(pydantic.BaseModel):
        a: int = 1

    assert sorted(gaps("bare", bare)) == ["bare: Parameters", "bare: Returns"]
    assert list(gaps("full", full)) == [] and list(gaps("procedure", procedure)) == []
    assert list(gaps("Plain", Plain)) == ["Plain: Parameters"]
    assert list(gaps("Record", Record)) == [] and list(gaps("Model", Model)) == []
    Plain.twice = bare  # type: ignore[attr-defined]
    module = type(inspect)("fake_api")
    module.Plain = Plain  # type: ignore[attr-defined]
    Plain.__module__ = "fake_api"
    import sys

    sys.modules["fake_api"] = module
    try:
        assert "fake_api.Plain.twice: Parameters" in module_gaps("fake_api")
    finally:
        del sys.modules["fake_api"]


@pytest.mark.parametrize("module_name", documented_modules())
def test_public_callables_document_parameters_and_returns(module_name):
    missing = module_gaps(module_name)
    assert not missing, f"{len(missing)} public callables lack numpydoc sections:\n" + "\n".join(missing)
