"""The package's version, written only here: ``simt_pto.__version__``, ``simt-pto --version`` and the
distribution's metadata (pyproject.toml, ``[tool.setuptools.dynamic]``) all read it."""

__version__ = "0.1.0"
