"""What of the host's environment a node may see: no credentials, no URL's password."""

from __future__ import annotations

import os

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    from collections.abc import Mapping


# Names of host variables a node never sees: credentials and the worker's own settings.
_CREDENTIAL_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "CERT",
    "CONNECTION_STRING",
    "DATABASE_URL",
    "PGPASS",
    "DSN",
)
_CREDENTIAL_PREFIXES = (
    "AWS_",
    "AZURE_",
    "ARM_",
    "GOOGLE_",
    "GCP_",
    "GCLOUD_",
    "CLOUDSDK_",
    "DIGITALOCEAN_",
    "HEROKU_",
    "GITHUB_",
    "GH_",
    "GITLAB_",
    "CI_JOB_",
    "NPM_",
    "PYPI_",
    "TWINE_",
    "DOCKER_",
    "OPENAI_",
    "ANTHROPIC_",
    "HF_",
    "HUGGING_FACE_",
    "VAULT_",
    "KUBECONFIG",
    "OS_",
    "FLUKSIO_",
)
# Set per call by the engine for the reporter; everything else FLUKSIO_* is removed.
_REPORTER_VARIABLES = (
    "FLUKSIO_ARTIFACT_DIR",  # the store itself, where the call runs on the engine
    "FLUKSIO_ARTIFACT_URL",  # the store over HTTP, elsewhere
    "FLUKSIO_ARTIFACT_TOKEN",  # a token that can only move artifacts, minted per call
    "FLUKSIO_ARTIFACT_CACHE",
    "FLUKSIO_ARTIFACT_CACHE_BYTES",
)


def is_credential_name(name: str) -> bool:
    upper = name.upper()
    if upper in _REPORTER_VARIABLES:
        return False
    return any(word in upper for word in _CREDENTIAL_WORDS) or upper.startswith(
        _CREDENTIAL_PREFIXES
    )


# ``scheme://user:password@`` (or ``scheme://token@``) inside a value: the part a node
# must not see, wherever a URL with credentials stands (a proxy, a broker, a database).
_URL_CREDENTIALS = r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@"


def without_url_credentials(value: str) -> str:
    """``value`` with the user and password taken out of every URL in it."""
    if "://" not in value or "@" not in value:
        return value  # the common case, without importing re (a spawned call pays for it)
    import re

    return re.sub(_URL_CREDENTIALS, r"\1", value)


def filtered_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The host environment a node may see.

    Credential-like variables are removed by name; in what remains, every URL keeps its
    host but loses its credentials (``HTTP_PROXY=http://u:pw@proxy:3128`` is seen as
    ``http://proxy:3128``).
    """
    return {k: without_url_credentials(v) for k, v in environ.items() if not is_credential_name(k)}


def drop_credentials() -> None:
    for name in list(os.environ):
        if is_credential_name(name):
            del os.environ[name]
        else:
            value = os.environ[name]
            cleaned = without_url_credentials(value)
            if cleaned != value:
                os.environ[name] = cleaned
