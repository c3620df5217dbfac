"""Conveyor's own version, and the application's (recorded in every failed attempt)."""

from __future__ import annotations

import os

from conveyor.model import validation as valid
from conveyor.model.errors import ConfigurationError, InvalidJob

__version__ = "0.1.0"


def app_version(given: str | None) -> str:
    """The application's version: `given` (Conveyor(version=)), else
    $CONVEYOR_APP_VERSION, else ""; checked as a stored name is."""
    value = given if given is not None else os.environ.get("CONVEYOR_APP_VERSION", "")
    if value == "":
        return ""
    try:
        return valid.name("version", value)
    except InvalidJob as exc:
        source = "version=" if given is not None else "$CONVEYOR_APP_VERSION"
        raise ConfigurationError(f"{source}: {exc}") from None
