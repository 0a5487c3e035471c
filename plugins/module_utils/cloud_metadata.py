"""The clouds' metadata services: which cloud a node is on, whether its metadata service
answers, and the notices it posts before the cloud takes the node away.

The one implementation behind the heartbeat's ``imds`` and ``spot_notice`` probes and the
heartbeat role's probe plan (``heartbeat_probe_plan``): ``nodeprep.heartbeat.cloud_metadata``
is a symlink to this file. Standard library and Python 3.8 only, for the module_utils use.

All three services answer at 169.254.169.254 and differ in how they are asked:
- AWS (IMDSv2): a session token from ``PUT /latest/api/token``, sent with every GET; a spot
  interruption appears at ``spot/instance-action`` about two minutes ahead (AWS advises
  polling every 5 s), scheduled maintenance at ``events/maintenance/scheduled``.
- GCP: ``Metadata-Flavor: Google`` on the request and on the answer; ``instance/preempted``
  turns ``TRUE`` about 30 s before a spot VM stops, ``instance/maintenance-event`` leaves
  ``NONE`` before a host maintenance.
- Azure: ``Metadata: true`` on the request; ``scheduledevents`` lists Preempt (about 30 s
  ahead), Terminate, Reboot, Redeploy and Freeze events for every VM of an availability set
  or placement group; those whose ``Resources`` name this VM are its notices.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

PROVIDERS = ("aws", "gcp", "azure")
LABELS = {"aws": "AWS", "gcp": "GCP", "azure": "Azure"}
A_VM = {"aws": "an AWS VM", "gcp": "a GCP VM", "azure": "an Azure VM"}
DEFAULT_URL = "http://169.254.169.254"
DMI_DIR = "/sys/class/dmi/id"
AWS_TOKEN_PATH = "/latest/api/token"
AWS_TOKEN_HEADER = "X-aws-ec2-metadata-token"
AWS_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_SPOT_PATH = "/latest/meta-data/spot/instance-action"
AWS_EVENTS_PATH = "/latest/meta-data/events/maintenance/scheduled"
GCP_PREFIX = "/computeMetadata/v1/instance"
AZURE_EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
AZURE_NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
# Azure's own asset tag on every VM it runs (its documented way to tell it from DMI).
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"
DEFAULT_PATHS = {
    "aws": "/latest/meta-data/",
    "gcp": GCP_PREFIX + "/id",
    "azure": "/metadata/instance/compute/vmId?api-version=2021-02-01&format=text",
}
_DONE_EVENT_STATES = ("completed", "canceled", "cancelled")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class MetadataError(ConnectionError):
    """The metadata service answered, but not as the protocol says; str() says what it did."""


def request(
    url: str, timeout: float, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP exchange, never through a proxy; non-2xx statuses are returned, not raised."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with _NO_PROXY.open(req, timeout=timeout) as resp:
            return int(resp.status), dict(resp.headers.items()), resp.read(65536)
    except urllib.error.HTTPError as err:
        body = err.read(65536) if err.fp else b""
        return int(err.code), dict(err.headers.items()) if err.headers else {}, body


def _left(deadline: float) -> float:
    return max(0.01, deadline - time.monotonic())


class Metadata:
    """One provider's service at BASE_URL: ``get`` a path, ``notices`` now pending."""

    provider = ""

    def __init__(self, base_url: str = DEFAULT_URL, token_ttl: int = 21600) -> None:
        self.base_url = base_url.rstrip("/")
        self.token_ttl = token_ttl

    @property
    def label(self) -> str:
        return LABELS[self.provider]

    @property
    def default_path(self) -> str:
        return DEFAULT_PATHS[self.provider]

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        raise NotImplementedError

    def notices(self, timeout: float) -> tuple[str, bool, bool]:
        """(evidence, ok, notice): a pending notice is not ok and is a notice."""
        raise NotImplementedError

    def answers(self, timeout: float) -> str:
        """What the service said to a GET of its default path; raises MetadataError, saying
        what went wrong, where it did not answer as it should."""
        url = self.base_url + self.default_path
        try:
            status, _ = self.get(self.default_path, timeout)
        except MetadataError:
            raise
        except OSError as err:
            raise MetadataError(f"{url}: {describe(err)}{self.silent_hint}") from err
        if status != 200:
            raise MetadataError(f"GET {url} answered HTTP {status}, not 200")
        return f"its metadata service answered at {self.base_url}"

    silent_hint = ""


class AwsMetadata(Metadata):
    """IMDSv2: a token from a PUT, reused until near its expiry, renewed once on HTTP 401."""

    provider = "aws"
    silent_hint = (
        " (IMDSv2 answers a PUT only within its hop limit: raise it for containers, "
        "aws ec2 modify-instance-metadata-options --http-put-response-hop-limit 2)"
    )

    def __init__(self, base_url: str = DEFAULT_URL, token_ttl: int = 21600) -> None:
        super().__init__(base_url, token_ttl)
        self._token: str | None = None
        self._token_expires = 0.0

    def _fetch_token(self, timeout: float) -> str:
        url = self.base_url + AWS_TOKEN_PATH
        status, _, body = request(
            url, timeout, method="PUT", headers={AWS_TTL_HEADER: str(self.token_ttl)}
        )
        if status == 403:
            raise MetadataError(
                f"PUT {url} answered HTTP 403: the instance metadata service is turned off "
                "for this instance (aws ec2 modify-instance-metadata-options --http-endpoint "
                "enabled)"
            )
        if status != 200 or not body:
            raise MetadataError(
                f"PUT {url} answered HTTP {status}: no IMDSv2 token service there, so no "
                "metadata or notice can be read"
            )
        self._token = body.decode("ascii", "replace").strip()
        self._token_expires = time.monotonic() + self.token_ttl * 0.9
        return self._token

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        deadline = time.monotonic() + timeout
        token = self._token
        if token is None or time.monotonic() >= self._token_expires:
            token = self._fetch_token(timeout)
        url = self.base_url + path
        status, _, body = request(url, _left(deadline), headers={AWS_TOKEN_HEADER: token})
        if status == 401:
            self._token = None
            token = self._fetch_token(_left(deadline))
            status, _, body = request(url, _left(deadline), headers={AWS_TOKEN_HEADER: token})
        return status, body

    def notices(self, timeout: float) -> tuple[str, bool, bool]:
        deadline = time.monotonic() + timeout
        status, body = self.get(AWS_SPOT_PATH, timeout)
        if status == 200:
            text = body.decode("utf-8", "replace").strip()
            return f"spot instance-action notice: {text}", False, True
        if status != 404:
            return f"metadata {AWS_SPOT_PATH}: HTTP {status}", False, False
        status, body = self.get(AWS_EVENTS_PATH, _left(deadline))
        if status not in (200, 404):
            return f"metadata {AWS_EVENTS_PATH}: HTTP {status}", False, False
        pending = _aws_pending(body) if status == 200 else []
        if pending:
            return f"scheduled event notice: {'; '.join(pending)}", False, True
        return "no spot or maintenance notice", True, False


def _aws_pending(body: bytes) -> list[str]:
    try:
        events = json.loads(body or b"[]")
    except ValueError:
        return ["unparseable scheduled-events answer"]
    if not isinstance(events, list):
        return [str(events)]
    return [
        f"{e.get('Code', '?')} at {e.get('NotBefore', '?')}"
        for e in events
        if isinstance(e, dict) and str(e.get("State", "")).lower() not in _DONE_EVENT_STATES
    ]


class GcpMetadata(Metadata):
    """GCP's metadata server: the flavor header both ways, plain-text values."""

    provider = "gcp"

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        url = self.base_url + path
        status, headers, body = request(url, timeout, headers={"Metadata-Flavor": "Google"})
        flavor = {k.lower(): v for k, v in headers.items()}.get("metadata-flavor")
        if status == 200 and flavor != "Google":
            raise MetadataError(
                f"GET {url} answered without Metadata-Flavor: Google: not GCP's metadata server"
            )
        return status, body

    def notices(self, timeout: float) -> tuple[str, bool, bool]:
        deadline = time.monotonic() + timeout
        found = []
        for leaf, quiet in (("preempted", "FALSE"), ("maintenance-event", "NONE")):
            status, body = self.get(f"{GCP_PREFIX}/{leaf}", _left(deadline))
            if status != 200:
                return f"metadata {GCP_PREFIX}/{leaf}: HTTP {status}", False, False
            value = body.decode("utf-8", "replace").strip()
            if value != quiet:
                found.append(f"{leaf} {value}")
        if found:
            return f"preemption or maintenance notice: {'; '.join(found)}", False, True
        return "no preemption or maintenance notice", True, False


class AzureMetadata(Metadata):
    """Azure IMDS: ``Metadata: true`` on every request; scheduled events as one document."""

    provider = "azure"

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        status, _, body = request(self.base_url + path, timeout, headers={"Metadata": "true"})
        return status, body

    def __init__(self, base_url: str = DEFAULT_URL, token_ttl: int = 21600) -> None:
        super().__init__(base_url, token_ttl)
        self._name: str | None = None

    def _vm_name(self, timeout: float) -> str:
        """This VM's name, which an event's Resources lists when the event is for it ('' when
        unknown: then every event counts, rather than miss this VM's own)."""
        if self._name is None:
            status, body = self.get(AZURE_NAME_PATH, timeout)
            if status != 200:
                return ""
            self._name = body.decode("utf-8", "replace").strip()
        return self._name

    def notices(self, timeout: float) -> tuple[str, bool, bool]:
        deadline = time.monotonic() + timeout
        status, body = self.get(AZURE_EVENTS_PATH, timeout)
        if status != 200:
            return f"metadata {AZURE_EVENTS_PATH}: HTTP {status}", False, False
        try:
            events = json.loads(body or b"{}").get("Events", [])
        except (ValueError, AttributeError):
            events = None
        if not isinstance(events, list):
            return "unparseable scheduled-events answer", False, False
        name = self._vm_name(_left(deadline)) if events else ""
        pending = [
            f"{e.get('EventType', '?')} at {e.get('NotBefore', '?') or 'once started'}"
            for e in events
            if isinstance(e, dict) and (not name or name in (e.get("Resources") or []))
        ]
        if pending:
            return f"scheduled event notice: {'; '.join(pending)}", False, True
        return "no scheduled event", True, False


_CLIENTS = {"aws": AwsMetadata, "gcp": GcpMetadata, "azure": AzureMetadata}


def client(provider: str, base_url: str = DEFAULT_URL, token_ttl: int = 21600) -> Metadata:
    """The client of PROVIDER (one of PROVIDERS) for the service at BASE_URL."""
    return _CLIENTS[provider](base_url, token_ttl)


def describe(err: BaseException) -> str:
    """One short phrase for why an exchange failed."""
    if isinstance(err, urllib.error.URLError) and isinstance(err.reason, BaseException):
        err = err.reason
    if isinstance(err, MetadataError):
        return str(err)
    if isinstance(err, (TimeoutError, OSError)) and "timed out" in str(err):
        return "timed out"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    return f"{type(err).__name__}: {err}"


def _dmi(dmi_dir: str, name: str) -> str:
    try:
        with open(os.path.join(dmi_dir, name), encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def cloud_from_dmi(dmi_dir: str = DMI_DIR) -> tuple[str, str]:
    """(provider, evidence) from the firmware's DMI strings, without a network exchange;
    provider is "none" on a machine no cloud's firmware describes."""
    vendor, product = _dmi(dmi_dir, "sys_vendor"), _dmi(dmi_dir, "product_name")
    bios = _dmi(dmi_dir, "bios_version")
    if vendor == "Amazon EC2" or "amazon" in bios.lower():
        return "aws", f"DMI sys_vendor {vendor!r}, bios_version {bios!r}"
    if vendor == "Google" or product == "Google Compute Engine":
        return "gcp", f"DMI sys_vendor {vendor!r}, product_name {product!r}"
    if _dmi(dmi_dir, "chassis_asset_tag") == AZURE_ASSET_TAG:
        return "azure", f"DMI chassis_asset_tag {AZURE_ASSET_TAG} (Azure's)"
    if not vendor and not product:
        return "none", f"no DMI strings under {dmi_dir}"
    return "none", f"DMI sys_vendor {vendor!r}, product_name {product!r}: no cloud's"
