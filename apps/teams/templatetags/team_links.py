"""Template filters of the teams app."""

import re

from django import template
from django.urls import reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

register = template.Library()

ASK_A_PLATFORM_ADMIN = re.compile(r"\b([Aa]sk a platform admin)\b")


@register.filter
def link_platform_admins(message) -> str:
    """The message, escaped, with "ask a platform admin" linked to the page that lists them
    (refusals from services are plain text, so the API gives the same words)."""
    text = str(conditional_escape(message))
    url = reverse("teams:platform-admins")
    return mark_safe(  # noqa: S308 - the text was escaped above; only our link is added
        ASK_A_PLATFORM_ADMIN.sub(lambda m: format_html('<a href="{}">{}</a>', url, m[1]), text)
    )
