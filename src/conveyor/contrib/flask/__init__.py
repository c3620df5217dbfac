"""Flask: the Conveyor app as an extension, enqueued from views, and the `conveyor`
command as `flask conveyor ...`.

>>> jobs = Conveyor("sqlite:///jobs.db")            # your tasks use @jobs.task
>>> conveyor = FlaskConveyor(jobs)
>>> def create_app() -> Flask:
...     web = Flask(__name__)
...     conveyor.init_app(web)
...     return web

A view enqueues with the sync API (`send_welcome.enqueue(user_id)`): it runs the
async core on the app's own background thread, so it works under any WSGI server.
`flask conveyor worker -c 20`, `flask conveyor jobs list`, `flask conveyor dashboard`
are the `conveyor` commands with this app filled in.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
from flask import Flask, current_app

from conveyor.app import Conveyor
from conveyor.contrib._commands import command_line, import_path_of
from conveyor.model.errors import ConfigurationError

__all__ = ["FlaskConveyor", "current_conveyor"]

EXTENSION = "conveyor"


class FlaskConveyor:
    """The extension. `import_path` ("pkg.module:jobs") is found by itself when the
    Conveyor app is a module attribute; pool children and --reload import it by it."""

    def __init__(
        self, app: Conveyor, flask_app: Flask | None = None, *, import_path: str | None = None
    ) -> None:
        self.app = app
        self._import_path = import_path
        if flask_app is not None:
            self.init_app(flask_app)

    @property
    def import_path(self) -> str:
        if self._import_path is None:
            self._import_path = import_path_of(self.app)
        return self._import_path

    def init_app(self, flask_app: Flask) -> None:
        flask_app.extensions[EXTENSION] = self
        flask_app.cli.add_command(self._command())

    def _command(self) -> click.Command:
        extension = self

        @click.command(
            EXTENSION,
            add_help_option=False,
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
            help="The conveyor command for this app: flask conveyor worker, "
            "scheduler, dashboard, jobs, dead, ... (flask conveyor --help).",
        )
        @click.argument("args", nargs=-1, type=click.UNPROCESSED)
        def conveyor(args: Sequence[str]) -> None:
            from conveyor.cli.main import main

            raise SystemExit(main(command_line(extension.import_path, args)))

        return conveyor


def current_conveyor() -> Conveyor:
    """The Conveyor app of the current Flask app (inside a request or app context)."""
    extension = current_app.extensions.get(EXTENSION)
    if not isinstance(extension, FlaskConveyor):
        raise ConfigurationError(
            "this Flask app has no Conveyor: call FlaskConveyor(jobs).init_app(flask_app)"
        )
    return extension.app
