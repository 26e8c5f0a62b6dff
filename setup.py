"""The packages of each folder that ``[tool.setuptools.package-dir]`` maps into ``llmload``.

pyproject.toml declares the mapping once (``llmload.reports = "reports"``, ...); this
lists every package below each mapped folder, which setuptools' own discovery cannot do
for folders installed under another name (data folders such as ``reports/baselines``
are namespace packages, as ``packages.find`` made them).  Everything else is in pyproject.toml.
"""

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).resolve().parent
with open(ROOT / "pyproject.toml", "rb") as f:
    MAPPING: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]

setup(
    packages=[
        name
        for package, folder in MAPPING.items()
        for name in (
            package,
            *(f"{package}.{sub}" for sub in find_namespace_packages(ROOT / folder)),
        )
    ]
)
