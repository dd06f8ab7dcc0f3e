"""The package version, written here only: ``pyproject.toml`` reads it (``dynamic = ["version"]``,
``[tool.setuptools.dynamic]``) and ``CITATION.cff`` repeats it (checked by ``tests/test_cli_conventions.py``)."""

__version__ = "0.1.0"
