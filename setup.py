"""Maps folders of the source tree into the package (everything else is in pyproject.toml), so the wheel works
outside the tree: the shipped models (models/ -> circuitlab/models/), the dashboard (apps/ ->
circuitlab/apps/), the committed results its pages and the claims read (results/ -> circuitlab/results/) and the
natural stories (data/natural/ -> circuitlab/natural/); circuitlab.resources finds each."""

from setuptools import find_packages, setup

MAPPED = {
    "circuitlab.models": "models",
    "circuitlab.apps": "apps",
    "circuitlab.apps.views": "apps/views",
    "circuitlab.results": "results",
    "circuitlab.natural": "data/natural",
}

setup(packages=find_packages(include=["circuitlab*"]) + list(MAPPED), package_dir=MAPPED)
