import pytest

from apps.sso import discovery
from apps.sso.models import GroupMapping
from apps.teams.choices import GlobalRole, TeamRole
from tests.factories import TeamFactory
from tests.sso.provider import TokenRelay, start_provider, stop_provider

CLIENT_ID = "gpu-portal"


@pytest.fixture(scope="session")
def oidc_provider():
    provider = start_provider("--require-nonce")
    yield provider
    stop_provider(provider)


def enable_sso(settings, issuer: str) -> None:
    settings.OIDC_ISSUER = issuer
    settings.SSO_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = "portal-secret"
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "apps.sso.backends.PortalOIDCBackend",
    ]
    discovery.clear_cache()


@pytest.fixture
def sso(settings, oidc_provider):
    """The portal configured for the test provider, as OIDC_ISSUER etc. would configure it."""
    enable_sso(settings, oidc_provider.url)
    yield oidc_provider
    discovery.clear_cache()


@pytest.fixture
def token_relay(sso):
    """Puts a relay in front of the provider's token endpoint (the portal's discovered one)."""
    metadata = dict(discovery.provider_metadata())
    relay = TokenRelay(target=metadata["token_endpoint"]).start()
    metadata["token_endpoint"] = relay.url
    discovery._cache[sso.url] = (float("inf"), metadata)
    yield relay
    relay.stop()


@pytest.fixture
def teams():
    """Teams vision and nlp managed by the IdP's groups, scratch managed in the portal, and a
    finance group."""
    vision, nlp, scratch = (TeamFactory(slug=slug) for slug in ("vision", "nlp", "scratch"))
    GroupMapping.objects.create(group="gpu-vision", team=vision, role=TeamRole.MEMBER)
    GroupMapping.objects.create(group="gpu-nlp-admins", team=nlp, role=TeamRole.TEAM_ADMIN)
    GroupMapping.objects.create(group="gpu-nlp", team=nlp, role=TeamRole.MEMBER)
    GroupMapping.objects.create(group="gpu-finance", role=GlobalRole.FINANCE)
    return {"vision": vision, "nlp": nlp, "scratch": scratch}
