"""Maps two folders of the source tree into the package (everything else is in pyproject.toml): the shipped
models (models/ -> circuitlab/models/) and the dashboard (apps/ -> circuitlab/apps/)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["circuitlab*"]) + ["circuitlab.models", "circuitlab.apps", "circuitlab.apps.views"],
    package_dir={"circuitlab.models": "models", "circuitlab.apps": "apps", "circuitlab.apps.views": "apps/views"},
)
