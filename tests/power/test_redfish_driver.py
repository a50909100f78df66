"""The Redfish power driver against real Redfish BMCs: sushy-tools' emulator processes with the
fake systems driver, where a power change lands 1-11 s after it is asked, as on hardware."""

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apps.fleet.models import Node
from apps.power.drivers import driver_for
from apps.power.drivers.base import PowerDriverError
from apps.power.drivers.redfish import RedfishDriver
from tests.processes import free_port, redfish_emulator, wait_for

USER, PASSWORD = "portal", "bmc-secret-1"
# Every system the power cycle test drives is its own, so tests never see each other's state.
SYSTEMS = [
    {"uuid": "0f6c3a8e-1", "name": "gpu-cycle", "power_state": "On"},
    {"uuid": "0f6c3a8e-2", "name": "gpu-off", "power_state": "Off"},
    {"uuid": "0f6c3a8e-3", "name": "gpu-path", "power_state": "On"},
]
# The fake driver applies a change at most 11 s after it is asked; leave room on a busy host.
POWER_CHANGE_TIMEOUT = 40


@pytest.fixture(scope="module")
def bmc(tmp_path_factory):
    """A BMC managing three systems, behind HTTP Basic authentication."""
    with redfish_emulator(tmp_path_factory.mktemp("bmc"), SYSTEMS, users={USER: PASSWORD}) as url:
        yield url


@pytest.fixture(scope="module")
def single_bmc(tmp_path_factory):
    """A BMC managing one system, as most servers' BMCs do."""
    with redfish_emulator(
        tmp_path_factory.mktemp("single"),
        [{"uuid": "5d1e", "name": "only", "power_state": "On"}],
        users={USER: PASSWORD},
    ) as url:
        yield url


@pytest.fixture(autouse=True)
def credentials(settings):
    settings.POWER_REDFISH_USERNAME = USER
    settings.POWER_REDFISH_PASSWORD = PASSWORD
    settings.POWER_REDFISH_VERIFY_TLS = True
    settings.POWER_REDFISH_AUTH = "auto"
    settings.POWER_REDFISH_TIMEOUT_SECONDS = 5
    return settings


def node(**labels) -> Node:
    return Node(hostname="gpu-07", labels={"power_driver": "redfish", **labels})


@pytest.mark.slow
def test_power_off_then_on_is_read_back_once_the_bmc_has_changed_it(bmc):
    gpu = node(redfish_url=bmc, redfish_system="0f6c3a8e-1")
    driver = driver_for(gpu)
    assert isinstance(driver, RedfishDriver)
    assert driver.read_state(gpu) == "on"

    driver.power_off(gpu)
    assert wait_for(lambda: driver.read_state(gpu) == "off", timeout=POWER_CHANGE_TIMEOUT)

    driver.power_on(gpu)
    assert wait_for(lambda: driver.read_state(gpu) == "on", timeout=POWER_CHANGE_TIMEOUT)


def test_a_system_already_in_the_asked_state_is_not_reset(tmp_path):
    systems = [
        {"uuid": "a", "name": "off", "power_state": "Off"},
        {"uuid": "b", "name": "on", "power_state": "On"},
    ]
    with redfish_emulator(tmp_path, systems, users={USER: PASSWORD}) as url:
        driver = RedfishDriver()
        driver.power_off(node(redfish_url=url, redfish_system="a"))
        driver.power_on(node(redfish_url=url, redfish_system="b"))
        log = (tmp_path / "emulator.log").read_text()
    assert "GET /redfish/v1/Systems/a " in log and "GET /redfish/v1/Systems/b " in log
    assert "ComputerSystem.Reset" not in log


def test_an_unknown_driver_name_is_refused_with_the_known_ones():
    with pytest.raises(PowerDriverError, match=r"gpu-07: unknown power driver 'ipmi' .*redfish"):
        driver_for(Node(hostname="gpu-07", labels={"power_driver": "ipmi"}))


def test_the_system_may_be_named_by_its_path(bmc):
    gpu = node(redfish_url=bmc + "/", redfish_system="/redfish/v1/Systems/0f6c3a8e-3")
    assert RedfishDriver().read_state(gpu) == "on"


def test_a_bmc_with_one_system_needs_no_system_label(single_bmc):
    assert RedfishDriver().read_state(node(redfish_url=single_bmc)) == "on"


def test_a_bmc_with_several_systems_needs_the_label_and_lists_them(bmc):
    with pytest.raises(PowerDriverError) as error:
        RedfishDriver().read_state(node(redfish_url=bmc))
    message = str(error.value)
    assert "manages 3 systems" in message and "redfish_system" in message
    assert "0f6c3a8e-1" in message and "0f6c3a8e-3" in message


def test_an_unknown_system_is_named_with_the_ones_the_bmc_has(bmc):
    with pytest.raises(PowerDriverError) as error:
        RedfishDriver().power_off(node(redfish_url=bmc, redfish_system="no-such-system"))
    message = str(error.value)
    assert message.startswith("Node gpu-07: the BMC at http://127.0.0.1:")
    assert "has no system /redfish/v1/Systems/no-such-system" in message
    assert "0f6c3a8e-2" in message and "redfish_system label" in message


def test_wrong_credentials_say_which_settings_to_check(bmc, settings):
    settings.POWER_REDFISH_PASSWORD = "not-the-password"
    for auth in ("auto", "basic"):
        settings.POWER_REDFISH_AUTH = auth
        with pytest.raises(PowerDriverError) as error:
            RedfishDriver().power_on(node(redfish_url=bmc, redfish_system="0f6c3a8e-2"))
        assert "refused the credentials (HTTP 401)" in str(error.value)
        assert "POWER_REDFISH_PASSWORD" in str(error.value)
    settings.POWER_REDFISH_PASSWORD, settings.POWER_REDFISH_AUTH = PASSWORD, "kerberos"
    with pytest.raises(PowerDriverError, match="POWER_REDFISH_AUTH is 'kerberos'"):
        RedfishDriver().read_state(node(redfish_url=bmc, redfish_system="0f6c3a8e-2"))


def test_a_portal_without_a_bmc_account_says_which_setting_is_missing(bmc, settings):
    settings.POWER_REDFISH_USERNAME = ""
    with pytest.raises(PowerDriverError, match="POWER_REDFISH_USERNAME is not set"):
        RedfishDriver().read_state(node(redfish_url=bmc, redfish_system="0f6c3a8e-2"))


def test_an_unreachable_bmc_is_reported_as_unreachable():
    gpu = node(redfish_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(PowerDriverError) as error:
        RedfishDriver().power_off(gpu)
    assert "could not connect to the BMC at http://127.0.0.1:" in str(error.value)
    assert "unreachable" in str(error.value)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({}, "no redfish_url label"),
        ({"redfish_url": "  "}, "no redfish_url label"),
        ({"redfish_url": "10.0.0.17"}, "must start with https:// or http://"),
    ],
)
def test_a_node_without_a_usable_bmc_url_is_refused(labels, expected):
    with pytest.raises(PowerDriverError, match=expected):
        RedfishDriver().read_state(node(**labels))


def test_a_bmc_that_refuses_power_off_says_so(tmp_path):
    with redfish_emulator(
        tmp_path,
        [{"uuid": "c", "name": "locked", "power_state": "On"}],
        users={USER: PASSWORD},
        settings={"SUSHY_EMULATOR_DISABLE_POWER_OFF": True},
    ) as url:
        gpu = node(redfish_url=url)
        with pytest.raises(PowerDriverError) as error:
            RedfishDriver().power_off(gpu)
        assert RedfishDriver().read_state(gpu) == "on"
    message = str(error.value)
    assert "could not ask GracefulShutdown of the BMC" in message
    assert "HTTP 400" in message and "Can not request power off" in message


def _self_signed(directory):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bmc.test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "bmc.crt", directory / "bmc.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_a_self_signed_bmc_certificate_is_refused_unless_verification_is_off(tmp_path, settings):
    with redfish_emulator(
        tmp_path,
        [{"uuid": "d", "name": "tls", "power_state": "Off"}],
        users={USER: PASSWORD},
        certificate=_self_signed(tmp_path),
    ) as url:
        assert url.startswith("https://")
        gpu = node(redfish_url=url)
        with pytest.raises(PowerDriverError) as error:
            RedfishDriver().read_state(gpu)
        assert "TLS certificate is not trusted" in str(error.value)
        assert "POWER_REDFISH_VERIFY_TLS=0" in str(error.value)

        settings.POWER_REDFISH_VERIFY_TLS = False
        assert RedfishDriver().read_state(gpu) == "off"
