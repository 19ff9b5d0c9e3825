"""The one rule for names and labels, wherever a person writes one.

Names (of workers, users, provisioners, profiles, flows) and labels: 1 to 63 characters of
ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit. Labels are
case-sensitive. The pattern is also a pydantic type (:data:`Name`) and a sentence
(:data:`NAME_RULE`) for errors, so every refusal says the same thing.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

__all__ = ["NAME_PATTERN", "NAME_RULE", "Name", "is_name"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
NAME_RULE = "must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
_NAME = re.compile(NAME_PATTERN)

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


def is_name(text: str) -> bool:
    return _NAME.match(text) is not None
