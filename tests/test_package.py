"""What an installed topicstream says about itself: its version, licence and type information."""

from __future__ import annotations

import re
from importlib.metadata import metadata, version
from pathlib import Path

from typer.testing import CliRunner

from service.cli import app

ROOT = Path(__file__).resolve().parents[1]


def test_the_command_tells_its_version() -> None:
    """An installed user could not find out which version ran (no ``--version``, no ``__version__``); the
    deploy manifests pull a tagged image."""
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"topicstream {version('topicstream')}"


def test_every_package_ships_its_type_marker_and_the_distribution_its_licence() -> None:
    """``evaluation`` had no ``py.typed`` (mypy skipped it in a user's project), and no licence text went with the
    Apache-2.0 distribution."""
    project = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib needs Python 3.11
    packages = ["kernels", "service", "evaluation"]
    assert 'include = ["kernels*", "service*", "evaluation*"]' in project
    for package in packages:
        assert (ROOT / package / "py.typed").is_file()
        assert re.search(rf'^{package} = \[[^]]*"py\.typed"', project, re.MULTILINE), package
    assert re.search(r'^license-files = \["LICENSE"\]$', project, re.MULTILINE)
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License\n                           Version 2.0")
    assert re.search(rf'^version = "{re.escape(metadata("topicstream")["Version"])}"$', project, re.MULTILINE)
