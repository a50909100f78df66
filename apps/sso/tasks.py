"""Beat's periodic check of SSO users with the identity provider; a thin wrapper."""

from celery import shared_task

from apps.sso import provider_check


@shared_task(name="sso.check_identities", time_limit=600, soft_time_limit=570)
def check_identities() -> dict:
    return provider_check.sso_identities_check()
