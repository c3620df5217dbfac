"""An app module whose own import fails: the CLI must say which import, in one line (line 3)."""

import conveyor_tests_dependency_that_is_not_installed  # type: ignore[import-not-found]  # noqa: F401
