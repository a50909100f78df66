"""Migration teams.0005: each old single token becomes a hashed, named token with the same key."""

import hashlib

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from rest_framework.authtoken.models import Token


@pytest.mark.django_db(transaction=True)
def test_old_tokens_move_to_hashed_named_tokens_and_keep_working():
    call_command("migrate", "teams", "0004", verbosity=0)
    # The user table as it was then: later migrations add columns the current model writes.
    then = MigrationExecutor(connection).loader.project_state(("teams", "0004_api_token")).apps
    alice = then.get_model("teams", "User").objects.create(username="alice")
    key = "0123456789abcdef0123456789abcdef01234567"
    # authtoken's table is the same before and after: its current model can write the row.
    Token.objects.create(key=key, user_id=alice.pk)

    # All apps: going back to teams.0004 also unapplied the apps that depend on teams.0005.
    call_command("migrate", verbosity=0)

    from apps.teams.models import ApiToken

    assert not Token.objects.exists()
    token = ApiToken.objects.get(user_id=alice.pk)
    assert token.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert token.scope == "write" and token.expires_at is None
    response = Client().get("/api/v1/teams/", HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 200
