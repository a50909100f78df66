"""Encryption of the IdP refresh tokens the portal keeps (Fernet: AES-128-CBC + HMAC-SHA256).

The key is derived from DJANGO_SECRET_KEY, so a copy of the database alone does not give the
tokens away. After the secret key changes the old tokens no longer open: `unseal` answers "",
and those users are checked at their next sign-in instead.
"""

import base64

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.utils.crypto import salted_hmac

_SALT = "apps.sso.sealing.refresh-token"


def _fernet() -> Fernet:
    digest = salted_hmac(_SALT, "", secret=settings.SECRET_KEY, algorithm="sha256").digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode() if value else ""


def unseal(sealed: str) -> str:
    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        return ""
