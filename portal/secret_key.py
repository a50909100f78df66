"""What makes a production secret key acceptable.

Imported by the settings, so nothing here may import Django models or settings.
"""

SECRET_KEY_MIN_LENGTH = 32
SECRET_KEY_MIN_DISTINCT = 10


def secret_key_problem(key: str, *, dev_key: str) -> str:
    """Why `key` is not fit for production, or "" when it is.

    Length alone lets "x" * 32 through; requiring distinct characters refuses such keys (and
    typed words) while any generated key passes: secrets.token_urlsafe(50) has ~40 distinct.
    """
    if key == dev_key or key.startswith("django-insecure-"):
        return "it is the development key."
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"it has {len(key)} characters, at least {SECRET_KEY_MIN_LENGTH} are needed."
    distinct = len(set(key))
    if distinct < SECRET_KEY_MIN_DISTINCT:
        return (
            f"it has only {distinct} distinct characters, at least "
            f"{SECRET_KEY_MIN_DISTINCT} are needed (it is not random)."
        )
    return ""
