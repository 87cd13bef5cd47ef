"""Packaging hook; everything else is in pyproject.toml.

``conf/`` and ``recipes/`` stay at the top of the repository (the source of truth) and ship inside
the wheel as ``runner/_conf`` and ``runner/_recipes`` (``runner.config.composing.layers`` looks there first); the
example data recipes train on, ``examples/data``, ships as ``runner/_data`` (``runner.config.paths.shipped`` finds it).
pyproject.toml cannot combine package discovery with packages mapped from other directories, so
the package list is built here.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["runner", "runner.*"]), "runner._conf", "runner._recipes", "runner._data"],
    package_dir={"runner._conf": "conf", "runner._recipes": "recipes", "runner._data": "examples/data"},
)
