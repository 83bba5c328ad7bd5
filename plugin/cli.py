"""``pytsd auth``: manage the credentials file of the built-in ``auth`` plugin."""

from __future__ import annotations

import sys

import click

from app.config import load_config
from plugin.credentials import CredentialsError, CredentialsFile
from plugin.spec import ROLES

ROLE = click.Choice(ROLES)


def _file(path: str | None) -> CredentialsFile:
    return CredentialsFile(path or load_config()["tsd.core.authentication.file"])


def _fail(exc: CredentialsError) -> click.ClickException:
    return click.ClickException(str(exc))


@click.group("auth")
def auth() -> None:
    """Manage API tokens and users (tsd.core.authentication.file)."""


FILE_OPTION = click.option("--file", "path", default=None,
                           help="Credentials file (default: tsd.core.authentication.file).")


@auth.command("add-token")
@click.option("--role", type=ROLE, required=True, help="read, write or admin.")
@click.option("--name", default="", help="A label to recognise the token by.")
@FILE_OPTION
def add_token(role: str, name: str, path: str | None) -> None:
    """Create an API token and print it (it is shown only this once)."""
    try:
        click.echo(_file(path).add_token(role, name))
    except CredentialsError as exc:
        raise _fail(exc) from exc


@auth.command("add-user")
@click.argument("name")
@click.option("--role", type=ROLE, required=True, help="read, write or admin.")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
@FILE_OPTION
def add_user(name: str, role: str, password_stdin: bool, path: str | None) -> None:
    """Create a basic-auth user (the password is prompted for, or read from stdin)."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    try:
        _file(path).add_user(name, password, role)
    except CredentialsError as exc:
        raise _fail(exc) from exc
    click.echo(f"user {name} added with the {role} role")


@auth.command("list")
@FILE_OPTION
def list_credentials(path: str | None) -> None:
    """List tokens and users (id, kind, role, name; never secrets)."""
    try:
        entries = _file(path).entries()
    except CredentialsError as exc:
        raise _fail(exc) from exc
    for entry in entries:
        click.echo(f"{entry.id}\t{entry.kind}\t{entry.role}\t{entry.name}")


@auth.command("revoke")
@click.argument("handle")
@FILE_OPTION
def revoke(handle: str, path: str | None) -> None:
    """Remove the token or user with this id or name."""
    try:
        count = _file(path).revoke(handle)
    except CredentialsError as exc:
        raise _fail(exc) from exc
    if not count:
        raise click.ClickException(f"No token or user {handle!r}")
    click.echo(f"revoked {count}")
