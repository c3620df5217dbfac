"""An app module that raises while it is imported (a bug in the user's own code):
the CLI must say it happened while importing the app, and where."""

from conveyor import Conveyor

app = Conveyor("sqlite:///never-opened.db")

SECONDS_PER_JOB = 60
JOBS_PER_MINUTE = SECONDS_PER_JOB / 0
