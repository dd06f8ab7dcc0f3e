"""The documentation site's sources: docstrings the API reference renders, maths, the notebook page.

mkdocstrings reads the docstrings as Markdown in the numpydoc layout (mkdocs.yml: ``docstring_style:
numpy``), so a Sphinx role (``:func:`x```) or directive (``.. math::``) would show as raw text:
cross-references are autorefs (``[`solve`][stochformer.integrate.solve]``) and formulas ``$...$`` /
``$$...$$`` (pymdownx.arithmatex, MathJax). The public API (``stochformer.__all__``) documents its
parameters and carries examples, which run here. The built site itself is checked by
``tests/test_docs_snippets.py`` (the strict build).
"""

from __future__ import annotations

import doctest
import inspect
import re
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stochformer"
SOURCES = sorted(PACKAGE.rglob("*.py"))

#: the roles and directives of reStructuredText / Sphinx that Markdown shows as they are
SPHINX_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const|ref|doc|term):`")
RST_DIRECTIVE = re.compile(r"^\s*\.\. (?:math|code-block|note|warning|seealso|versionadded|autofunction)::", re.M)
#: the pages that derive formulas (SPEC §3, §4, §5, §8), written as maths
MATH_PAGES = ["theory.md", "spectrum.md", "synchronisation.md", "convergence.md", "meanfield.md"]


def _hits(pattern: re.Pattern[str]) -> list[str]:
    out = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return out


def test_the_pattern_finds_a_sphinx_role():
    assert SPHINX_ROLE.search("see :func:`solve` and") and SPHINX_ROLE.search(":class:`~a.B`")
    assert not SPHINX_ROLE.search("see [`solve`][stochformer.integrate.solve]")
    assert RST_DIRECTIVE.search("text\n    .. math::\n") and not RST_DIRECTIVE.search("$$ x $$")


def test_no_sphinx_role_or_rst_directive_in_the_package():
    assert len(SOURCES) > 50  # the walk itself works
    roles = _hits(SPHINX_ROLE)
    assert not roles, "Sphinx roles render as raw text; write autorefs [`name`][dotted.path]:\n" + "\n".join(roles)
    directives = _hits(RST_DIRECTIVE)
    assert not directives, "reStructuredText directives render as raw text; use $$...$$:\n" + "\n".join(directives)


def test_the_site_is_configured_for_maths_numpydoc_pydantic_fields_and_the_notebook():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for needed in ("docstring_style: numpy", "pymdownx.arithmatex", "generic: true", "javascripts/mathjax.js",
                   "griffe_pydantic", "mkdocs-jupyter", "execute: false", "tutorial.ipynb", "signature_crossrefs: true",
                   "separate_signature: true", "line_length:"):
        assert needed in config, f"mkdocs.yml: {needed!r} is missing"
    assert (ROOT / "docs" / "javascripts" / "mathjax.js").is_file()
    notebook = ROOT / "docs" / "tutorial.ipynb"
    assert notebook.resolve() == (ROOT / "examples" / "tutorial.ipynb").resolve(), "docs/tutorial.ipynb is the example itself"
    for page in MATH_PAGES:
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert text.count("$$") >= 2 or text.count("$") >= 4, f"docs/{page}: no formula written as maths"


def test_every_docs_plugin_is_pinned_and_declared():
    pins = {line.split("==")[0].strip().lower() for line in (ROOT / "docs" / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]["docs"]
    declared = {re.split(r"[\[<>=; ]", requirement, maxsplit=1)[0].lower() for requirement in extra}
    for plugin in ("mkdocs", "mkdocs-material", "mkdocstrings", "mkdocstrings-python", "griffe-pydantic", "mkdocs-jupyter"):
        assert plugin in pins, f"docs/constraints.txt does not pin {plugin}"
    for plugin in ("mkdocs", "mkdocs-material", "mkdocstrings", "griffe-pydantic", "mkdocs-jupyter"):
        assert plugin in declared, f"the docs extra of pyproject.toml lacks {plugin}"


def _public() -> list[tuple[str, object]]:
    import stochformer

    return [(name, getattr(stochformer, name)) for name in stochformer.__all__]


def _section(doc: str, title: str) -> bool:
    return re.search(rf"^\s*{title}\n\s*-{{{len(title)}}}\s*$", doc, re.M) is not None


def test_the_public_api_is_documented_in_the_numpydoc_layout():
    missing = []
    for name, obj in _public():
        if inspect.ismodule(obj) or not callable(obj):
            continue  # stochformer.sphere (its functions are checked below) and the ACTIVATIONS table
        doc = inspect.getdoc(obj) or ""
        if not _section(doc, "Examples"):
            missing.append(f"{name}: Examples")
        takes = [p for p in inspect.signature(obj).parameters.values() if p.name not in ("self", "args", "kwargs")]
        if takes and not getattr(obj, "_is_protocol", False) and not _section(doc, "Parameters"):
            missing.append(f"{name}: Parameters")
    import stochformer.core.sphere as sphere

    if not (_section(inspect.getdoc(sphere.uniform) or "", "Parameters") and _section(inspect.getdoc(sphere.uniform) or "", "Returns")):
        missing.append("sphere.uniform: Parameters, Returns")
    assert not missing, f"numpydoc sections missing: {missing}"


def _documented_beyond_all() -> list[object]:
    """Objects outside ``stochformer.__all__`` whose docstrings carry examples."""
    import stochformer.core.sphere as sphere
    from stochformer.config import RunConfig
    from stochformer.experiments.phase import run_phase
    from stochformer.experiments.simulate import run_simulate
    from stochformer.model.kernel import critical_gain, first_moment_rate, lyapunov_exponent, lyapunov_spectrum
    from stochformer.theory import PairDiffusion, energy_decay_rate, expected_energy

    return [sphere.uniform, RunConfig, run_simulate, run_phase, PairDiffusion, expected_energy, energy_decay_rate,
            lyapunov_exponent, first_moment_rate, lyapunov_spectrum, critical_gain]


def test_the_public_api_examples_run():
    """The Examples sections of ``stochformer.__all__`` (and of the experiment and theory entry points)
    are doctests that pass (small sizes, CPU)."""
    finder, runner = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    objects = [obj for _, obj in _public() if callable(obj)] + _documented_beyond_all()
    tests = [t for obj in objects for t in finder.find(obj) if t.examples]
    assert len(tests) >= 20
    for test in tests:
        result = runner.run(test, out=lambda s: None)
        assert result.failed == 0, f"the example of {test.name} fails (python -m pytest --doctest-modules shows why)"
