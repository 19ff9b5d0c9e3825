"""asyncssh, imported without the warnings its import raises about what we never use.

asyncssh 2.24 names cryptography's DSA key types when it is imported, and cryptography 51
deprecates DSA: every command that reaches SSH printed five lines of
``CryptographyDeprecationWarning`` to its user. No DSA key is ever made or read here
(the keys we make are Ed25519; a site's DSA key would still be refused or accepted by
asyncssh as before), so only that warning, only during the import, is silenced.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="DSA is deprecated")
    import asyncssh
    from asyncssh.config import SSHClientConfig

__all__ = ["SSHClientConfig", "asyncssh"]
