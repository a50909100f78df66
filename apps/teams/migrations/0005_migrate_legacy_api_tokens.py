"""Move each user's single unnamed API token (rest_framework.authtoken, key stored in clear) to a
named, hashed ApiToken with the same key, so scripts keep working, and delete the clear copy.

Reversing keeps the new tokens' rows until 0004 is reversed; the clear keys cannot come back.
"""

import hashlib

from django.db import migrations

MIGRATED_NAME = "API token (before named tokens)"


def forwards(apps, schema_editor):
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("teams", "ApiToken")
    for legacy in Token.objects.all():
        token = ApiToken.objects.create(
            user_id=legacy.user_id,
            name=MIGRATED_NAME,
            scope="write",
            key_hash=hashlib.sha256(legacy.key.encode()).hexdigest(),
            prefix=legacy.key[:8],
            expires_at=None,
        )
        # auto_now_add set "now"; keep when the key was really made.
        ApiToken.objects.filter(pk=token.pk).update(created_at=legacy.created)
    Token.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("teams", "0004_api_token"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
