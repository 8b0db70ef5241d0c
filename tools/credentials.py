"""Where Ferry's tools and clients find their bearer token for a secure cluster.

An explicit ``token=`` wins; else ``FERRY_TOKEN_FILE`` names a file holding the token (``ferry
cluster up --secure`` writes ``<state dir>/admin.token``, mode 0600, and prints the export line);
else ``FERRY_TOKEN`` holds it. With none of them, requests carry no token (a cluster without
``security`` needs none). A token on a command line would show in ``ps``, so no tool takes one.
"""
from __future__ import annotations

import os

from metadata_quorum.kernel.errors import ErrorCode, FerryError

TOKEN_FILE_ENV = "FERRY_TOKEN_FILE"
TOKEN_ENV = "FERRY_TOKEN"


def default_token(environ: dict[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    path = env.get(TOKEN_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise FerryError(ErrorCode.INVALID_CONFIG,
                             f"cannot read the token file {TOKEN_FILE_ENV}={path}: {exc.strerror}") from None
        if not token:
            raise FerryError(ErrorCode.INVALID_CONFIG, f"the token file {TOKEN_FILE_ENV}={path} is empty")
        return token
    return env.get(TOKEN_ENV) or None


def resolve_token(token: str | None) -> str | None:
    """``token`` itself, or the environment's (see the module docstring)."""
    return token if token is not None else default_token()
