"""Opening PostgreSQL: a permanent mistake (unknown role or database, a wrong
password) is reported at once with what the server said; a password is never
printed, logged or mistaken for a host name, whatever characters it holds."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest
from backends_under_test import POSTGRES_URL
from pg_server import PrivateServer

from conveyor import Conveyor
from conveyor.model.errors import BackendUnavailable, ConfigurationError

# '@' and ':' are the characters that split a URL's user info; each fragment is
# distinctive, so finding one anywhere in the output means the password leaked.
PASSWORD = "Zq7@Xw9:Vb4"
FRAGMENTS = ("Zq7", "Xw9", "Vb4")


def schema_url(base: str, schema: str, **options: str) -> str:
    query = "&".join([f"schema={schema}", *(f"{k}={v}" for k, v in options.items())])
    return f"{base}{'&' if '?' in base else '?'}{query}"


def _with_user(url: str, userinfo: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{userinfo}@{rest.rpartition('@')[2]}"


def _with_database(url: str, database: str) -> str:
    head, _, tail = url.rpartition("/")
    return f"{head}/{database}{'?' + tail.partition('?')[2] if '?' in tail else ''}"


async def _open(url: str) -> float:
    """Seconds until app.backend() raised."""
    app = Conveyor(url)
    started = time.monotonic()
    try:
        await app.backend()
    finally:
        elapsed = time.monotonic() - started
        await app.aclose()
    return elapsed


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda url: _with_user(url, "nouser"), 'role "nouser" does not exist'),
        (
            lambda url: _with_database(url, "no_such_db_conveyor"),
            'database "no_such_db_conveyor" does not exist',
        ),
    ],
)
async def test_unknown_role_or_database_fails_at_once_with_the_servers_words(
    schema: str, change: object, said: str
) -> None:
    url = change(schema_url(POSTGRES_URL, schema, timeout="20"))  # type: ignore[operator]
    with pytest.raises(ConfigurationError) as refused:
        await _open(url)
    assert said in str(refused.value)
    assert "retry" not in str(refused.value)
    started = time.monotonic()
    with pytest.raises(ConfigurationError):
        await _open(url)
    assert time.monotonic() - started < 5  # not after the 20 s wait for a connection

    cli = subprocess.run(
        [sys.executable, "-m", "conveyor", "stats", "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2 and cli.stdout == ""  # bad configuration, as a bad URL
    [line] = cli.stderr.splitlines()
    assert said in line, line


LOGGING_SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)  # every logger, every level
from conveyor import Conveyor, ConveyorError
app = Conveyor(sys.argv[1])

@app.task(name="hello")
def hello() -> None: ...

try:
    hello.enqueue()
    print("enqueued", app.jobs.count())
except ConveyorError as exc:
    print(f"{type(exc).__name__}: {exc}")
app.close()
"""


def _run_logging(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LOGGING_SCRIPT, url], capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
@pytest.mark.parametrize("written", ["raw", "percent-encoded"])
def test_password_with_at_and_colon_connects_and_is_never_logged(schema: str, written: str) -> None:
    # The shared server trusts local connections: any password is accepted, so this
    # shows the URL is split where it should be (before, libpq took 'Xw9' for a host).
    secret = PASSWORD if written == "raw" else quote(PASSWORD, safe="")
    url = _with_user(schema_url(POSTGRES_URL, schema), f"postgres:{secret}")
    done = _run_logging(url)
    assert done.stdout == "enqueued 1\n", done.stdout + done.stderr
    assert "DEBUG" in done.stderr  # the logging under test did run
    for text in (done.stdout, done.stderr):
        assert not any(fragment in text for fragment in FRAGMENTS), text


@pytest.mark.slow
def test_password_is_not_logged_when_the_server_is_down(schema: str) -> None:
    from pg_server import free_port

    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{free_port()}/test?timeout=1"
    done = _run_logging(url)
    assert done.stdout.startswith("BackendUnavailable: "), done.stdout + done.stderr
    assert "postgres:***@127.0.0.1" in done.stdout
    for text in (done.stdout, done.stderr):
        assert not any(fragment in text for fragment in FRAGMENTS), text


@pytest.fixture
def password_server(private_server: PrivateServer) -> Iterator[tuple[PrivateServer, str]]:
    """The private server, with a role `app` that must log in with PASSWORD."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(private_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
        hba = conn.execute("SHOW hba_file").fetchone()
        assert hba is not None
        with open(str(hba[0])) as file:
            rules = file.read()
        with open(str(hba[0]), "w") as file:
            file.write(f"host all {role} 127.0.0.1/32 scram-sha-256\n{rules}")
        conn.execute("SELECT pg_reload_conf()")
    yield private_server, role


@pytest.mark.slow
async def test_wrong_password_fails_at_once_and_the_right_one_with_at_and_colon_works(
    password_server: tuple[PrivateServer, str],
) -> None:
    server, role = password_server
    base = f"127.0.0.1:{server.port}/postgres?timeout=20"
    wrong = f"postgresql://{role}:{PASSWORD}x@{base}"
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as refused:
        await _open(wrong)
    assert time.monotonic() - started < 5
    message = str(refused.value)
    assert f'password authentication failed for user "{role}"' in message
    assert not any(fragment in message for fragment in FRAGMENTS), message

    app = Conveyor(f"postgresql://{role}:{PASSWORD}@{base}&schema=conveyor_pw")
    try:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f"GRANT CREATE ON DATABASE postgres TO {role}")
        await app.backend()  # connects with the right password, migrates
        assert await app.admin.count() == 0
    finally:
        await app.aclose()

    down = f"postgresql://{role}:{PASSWORD}@127.0.0.1:{server.port}/postgres?timeout=1"
    server.stop()
    with pytest.raises(BackendUnavailable) as unavailable:
        await _open(down)
    assert "retry" in str(unavailable.value)
    assert not any(fragment in str(unavailable.value) for fragment in FRAGMENTS)
