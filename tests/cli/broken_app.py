"""An app module whose own import fails: the CLI must say which import, in one line."""

import conveyor_tests_dependency_that_is_not_installed  # noqa: F401
