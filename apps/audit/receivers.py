"""Audit events for what django-axes does at login (lockouts)."""

from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model
from django.dispatch import receiver

from apps.audit.services import audit_record
from portal.login_lockout import ADDRESS, lockouts_started

LOGIN_LOCKED_OUT = "login.locked_out"


@receiver(user_locked_out, dispatch_uid="audit_login_locked_out")
def audit_login_lockout(sender, request, username, ip_address, **kwargs) -> None:
    """One event for each lockout that begins, first or repeated, with the failures that
    caused it (of the user at this address, or of the whole address)."""
    for scope, failures in lockouts_started(request).items():
        target = get_user_model().objects.filter(username=username).first()
        if target is None:  # an unknown name: the attempts row is the only object there is
            target = AccessAttempt.objects.filter(username=username, ip_address=ip_address).first()
        if target is None:
            continue
        audit_record(
            actor=None,
            action=LOGIN_LOCKED_OUT,
            target=target,
            after={
                "scope": scope,
                "username": username,
                "ip_address": ip_address,
                "failures": failures,
                "locked_minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
            },
            reason="Too many failed log-ins from this address"
            if scope == ADDRESS
            else "Too many failed log-ins for this user from this address",
        )
