"""The three clouds' metadata services as the heartbeat reads them (cloud_metadata), against
stand-ins shaped like each (tests/cloud_standin.py, real HTTP on 127.0.0.1): whether the
service answers, its notices, and what is said when it does not answer as it should."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hb_endpoints import Endpoint

from nodeprep.heartbeat import cloud_metadata, probes
from nodeprep.heartbeat.config import ConfigError, parse
from nodeprep.lab.cloud_standin import CloudStandIn

NOTICES = {
    "aws": 'spot instance-action notice: {"action": "terminate"',
    "gcp": "preemption or maintenance notice: preempted TRUE",
    "azure": "scheduled event notice: Preempt at Sat, 05 Dec 2026 08:00:30 GMT",
}


def _probe(kind: str, provider: str, url: str) -> probes.Attempt:
    cfg = parse({"probes": [{"name": "m", "type": kind, "provider": provider, "url": url,
                             "interval": 1, "timeout": 1}]}, check_paths=False)  # fmt: skip
    factory = probes.imds_attempt if kind == "imds" else probes.spot_attempt
    return factory(cfg.probes[0])


@pytest.mark.parametrize("provider", cloud_metadata.PROVIDERS)
def test_each_service_answers_then_posts_its_notice(provider: str) -> None:
    with CloudStandIn(provider) as cloud:
        service = cloud_metadata.client(provider, cloud.url)
        assert service.answers(1.0) == f"its metadata service answered at {cloud.url}"
        metadata, notice = (
            _probe("imds", provider, cloud.url),
            _probe("spot_notice", provider, cloud.url),
        )
        assert metadata().ok
        quiet = notice()
        assert (quiet.ok, quiet.notice) == (True, False), quiet.evidence
        cloud.notice = True
        posted = notice()
        assert (posted.ok, posted.notice) == (False, True)
        assert posted.evidence.startswith(NOTICES[provider]), posted.evidence


def test_aws_without_a_token_service_says_so() -> None:
    with CloudStandIn("aws", token_service=False) as cloud:
        with pytest.raises(cloud_metadata.MetadataError) as said:
            cloud_metadata.client("aws", cloud.url).answers(1.0)
        out = _probe("spot_notice", "aws", cloud.url)()
    assert str(said.value) == (
        f"PUT {cloud.url}/latest/api/token answered HTTP 404: no IMDSv2 token service there, "
        "so no metadata or notice can be read"
    )
    assert (out.ok, out.notice) == (False, False)
    assert "answered HTTP 404: no IMDSv2 token service there" in out.evidence


def test_a_server_that_is_not_gcps_is_named() -> None:
    endpoint = Endpoint().start()  # answers 200 to anything, without Metadata-Flavor
    try:
        with pytest.raises(cloud_metadata.MetadataError, match="not GCP's metadata server"):
            cloud_metadata.client("gcp", endpoint.url).answers(1.0)
    finally:
        endpoint.stop()


@pytest.mark.parametrize("provider", cloud_metadata.PROVIDERS)
def test_a_request_without_the_providers_header_is_refused_by_the_standin(provider: str) -> None:
    """The stand-ins hold the clients to each protocol: asked plainly, they refuse."""
    with CloudStandIn(provider) as cloud:
        status, _, _ = cloud_metadata.request(
            cloud.url + cloud_metadata.DEFAULT_PATHS[provider], 1.0
        )
    assert status == {"aws": 401, "gcp": 403, "azure": 400}[provider]


def test_nothing_listening_is_a_clear_refusal() -> None:
    with CloudStandIn("azure") as cloud:
        url = cloud.url
    with pytest.raises(cloud_metadata.MetadataError, match="connection refused"):
        cloud_metadata.client("azure", url).answers(1.0)


@pytest.mark.parametrize(
    ("strings", "provider"),
    [
        ({"sys_vendor": "Amazon EC2", "product_name": "m7i.large"}, "aws"),
        ({"sys_vendor": "Xen", "bios_version": "4.11.amazon"}, "aws"),
        ({"sys_vendor": "Google", "product_name": "Google Compute Engine"}, "gcp"),
        ({"sys_vendor": "Microsoft Corporation",
          "chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77"}, "azure"),
        ({"sys_vendor": "Microsoft Corporation", "chassis_asset_tag": "0"}, "none"),
        ({"sys_vendor": "QEMU", "product_name": "Standard PC (Q35 + ICH9, 2009)"}, "none"),
        ({}, "none"),
    ],
)  # fmt: skip
def test_the_cloud_is_read_from_dmi(tmp_path: Path, strings: dict[str, str], provider: str) -> None:
    for name, value in strings.items():
        (tmp_path / name).write_text(value + "\n")
    found, evidence = cloud_metadata.cloud_from_dmi(str(tmp_path))
    assert found == provider, evidence
    assert evidence


def test_the_probe_config_takes_a_provider_and_its_default_path() -> None:
    cfg = parse({"probes": [{"name": "m", "type": "imds", "provider": "azure"}]}, check_paths=False)
    assert cfg.probes[0].path == cloud_metadata.DEFAULT_PATHS["azure"]
    assert cfg.probes[0].url == "http://169.254.169.254"
    with pytest.raises(
        ConfigError,
        match=re.escape("probes[0].provider: unknown provider 'oci'; use one of aws, gcp, azure"),
    ):
        parse(
            {"probes": [{"name": "m", "type": "spot_notice", "provider": "oci"}]}, check_paths=False
        )


def test_azure_events_for_other_vms_are_not_this_vms_notices() -> None:
    with CloudStandIn("azure") as cloud:
        notice = _probe("spot_notice", "azure", cloud.url)
        cloud.neighbour_notice = True
        assert notice().notice is False
        cloud.notice = True
        posted = notice()
    assert posted.notice
    assert posted.evidence == ("scheduled event notice: Preempt at Sat, 05 Dec 2026 08:00:30 GMT")


def test_an_events_document_without_a_list_is_unparseable_not_an_error(
    tmp_path: Path,
) -> None:
    endpoint = Endpoint().start()  # answers "ok" to anything: not JSON
    try:
        evidence, ok, notice = cloud_metadata.client("azure", endpoint.url).notices(1.0)
    finally:
        endpoint.stop()
    assert (evidence, ok, notice) == ("unparseable scheduled-events answer", False, False)
