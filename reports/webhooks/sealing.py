"""Secrets the server must read back (webhook signing secrets), sealed before they are
stored, so that a database dump or backup alone gives none of them (docs/webhooks.md).

Sealed with Fernet (AES-128-CBC and HMAC-SHA256, from `cryptography`) under a key derived
by HKDF from SECRET_KEY; a token sealed under a key in SECRET_KEY_FALLBACKS still opens, so
a new SECRET_KEY can take over while `manage.py reseal_webhook_secrets` reseals the rest.
"""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

# Binds the derived key to this one use: the same SECRET_KEY signs sessions (Django's own
# derivations use other salts), and never as this key.
PURPOSE = b"reportline sealed secrets v1"


class Unreadable(Exception):
    """No key the server has (SECRET_KEY or a fallback) opens the token."""


def seal(text: str) -> str:
    """The token to store for `text`, under the current SECRET_KEY."""
    return _keys().encrypt(text.encode()).decode()


def unseal(token: str) -> str:
    """The text `token` seals, or raise Unreadable."""
    try:
        return _keys().decrypt(token.encode()).decode()
    except InvalidToken:
        raise Unreadable("No secret key of this server opens it.") from None


def is_current(token: str) -> bool:
    """Whether `token` is sealed under the current SECRET_KEY (not only a fallback)."""
    try:
        _fernet(settings.SECRET_KEY).decrypt(token.encode())
    except InvalidToken:
        return False
    return True


def reseal(token: str) -> str:
    """`token` sealed again under the current SECRET_KEY, or raise Unreadable."""
    try:
        return _keys().rotate(token.encode()).decode()
    except InvalidToken:
        raise Unreadable("No secret key of this server opens it.") from None


def _keys() -> MultiFernet:
    """The current key first (it seals), then the fallbacks (they only open)."""
    return _multi((settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS))


@functools.lru_cache(maxsize=8)
def _multi(secret_keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([_fernet(key) for key in secret_keys])


@functools.lru_cache(maxsize=16)
def _fernet(secret_key: str) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE).derive(
        secret_key.encode()
    )
    return Fernet(base64.urlsafe_b64encode(derived))
