"""A FAKE at a true boundary (no AWS, GCP or Azure account here): a real HTTP server shaped
like one cloud's metadata service, as the heartbeat reads it. Tests serve it on 127.0.0.1;
`nodeprep lab metadata NODE up` runs this file inside a lab VM, on 169.254.169.254 (a dummy
interface), where the heartbeat looks for a cloud's metadata service, so that the `preempt`
drill can post an interruption notice there (``python3 cloud_standin.py aws HOST PORT
NOTICE_FILE``). Nothing here talks to a real cloud.

- aws: IMDSv2. ``PUT /latest/api/token`` with a TTL header gives a token; every GET under
  ``/latest/`` without a valid one is HTTP 401. ``spot/instance-action`` is 404 until a
  notice is posted; ``events/maintenance/scheduled`` is a JSON list;
  ``iam/security-credentials/`` names an instance role whose credentials are dummies (the
  heartbeat's growth helper reads them through boto3's chain and calls the tests' moto).
- gcp: every request needs ``Metadata-Flavor: Google`` (else 403) and every answer carries
  it; ``instance/preempted`` is FALSE or TRUE, ``instance/maintenance-event`` NONE or the
  event; the default service account's token, the project id and the zone are dummies.
- azure: every request needs ``Metadata: true`` (else 400); ``scheduledevents`` is one JSON
  document with an ``Events`` list.

``notice`` (or, with ``notice_file``, that file existing) posts the provider's notice (a
spot interruption, a preemption, a Preempt event for this VM, which Azure's stand-in calls
node1; ``neighbour_notice``, a Reboot for node2); ``token_service=False`` takes IMDSv2's
token endpoint away (HTTP 404), as on a service that has none.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SPOT = {"action": "terminate", "time": "2026-12-05T08:00:00Z"}
AZURE_EVENT = {"EventId": "A123", "EventType": "Preempt", "ResourceType": "VirtualMachine",
               "Resources": ["node1"], "EventStatus": "Scheduled",
               "NotBefore": "Sat, 05 Dec 2026 08:00:30 GMT"}  # fmt: skip
# An event for another VM of the same availability set: every VM sees it, only node2 is hit.
AZURE_NEIGHBOUR = {**AZURE_EVENT, "EventId": "B456", "EventType": "Reboot", "Resources": ["node2"]}
ROLE = "nodeprep-lab"
# The VM's service account token, project and zone (the growth action reads them).
GCP_TOKEN, GCP_PROJECT, GCP_ZONE = "ya29.standin-token", "nodeprep-test", "europe-west4-a"


def credentials() -> dict[str, str]:
    """An instance role's temporary credentials, valid for the next six hours (dummies)."""
    now = time.time()
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    return {"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": "testing",
            "SecretAccessKey": "testing", "Token": "testing",
            "LastUpdated": time.strftime(stamp, time.gmtime(now)),
            "Expiration": time.strftime(stamp, time.gmtime(now + 6 * 3600))}  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        return

    def _reply(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        cloud = self.server.cloud
        cloud.requests.append(("PUT", self.path))
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        if cloud.provider != "aws" or self.path != "/latest/api/token" or not cloud.token_service:
            self._reply(404, "Not Found")
        elif not ttl:
            self._reply(400, "missing TTL")
        else:
            self._reply(200, cloud.new_token())

    def do_GET(self) -> None:
        cloud = self.server.cloud
        cloud.requests.append(("GET", self.path))
        {"aws": self._aws, "gcp": self._gcp, "azure": self._azure}[cloud.provider]()

    def _aws(self) -> None:
        cloud = self.server.cloud
        if self.headers.get("X-aws-ec2-metadata-token") not in cloud.tokens:
            self._reply(401, "")
        elif self.path == "/latest/meta-data/spot/instance-action":
            self._reply(200, json.dumps(SPOT)) if cloud.notice else self._reply(404, "")
        elif self.path == "/latest/meta-data/events/maintenance/scheduled":
            self._reply(200, "[]")
        elif self.path.startswith("/latest/meta-data/iam/security-credentials"):
            # The instance role's credentials, as boto3's chain reads them on an EC2 node:
            # dummies that only the tests' moto endpoint accepts.
            if self.path.endswith("/"):
                self._reply(200, ROLE)
            else:
                self._reply(200, json.dumps(credentials()))
        elif self.path.startswith("/latest/meta-data/"):
            self._reply(200, "ami-id\ninstance-id\nspot/\n")
        else:
            self._reply(404, "")

    def _gcp(self) -> None:
        cloud = self.server.cloud
        flavor = {"Metadata-Flavor": "Google"}
        if self.headers.get("Metadata-Flavor") != "Google":
            self._reply(403, "Missing Metadata-Flavor:Google header.", flavor)
            return
        values = {
            "/computeMetadata/v1/instance/id": "4520031799277581759",
            "/computeMetadata/v1/project/project-id": GCP_PROJECT,
            "/computeMetadata/v1/instance/zone": f"projects/871234509876/zones/{GCP_ZONE}",
            "/computeMetadata/v1/instance/service-accounts/default/token": json.dumps(
                {"access_token": GCP_TOKEN, "expires_in": 3599, "token_type": "Bearer"}
            ),
            "/computeMetadata/v1/instance/preempted": "TRUE" if cloud.notice else "FALSE",
            "/computeMetadata/v1/instance/maintenance-event": "NONE",
        }
        if self.path in values:
            self._reply(200, values[self.path], flavor)
        else:
            self._reply(404, "", flavor)

    def _azure(self) -> None:
        cloud = self.server.cloud
        if self.headers.get("Metadata") != "true":
            self._reply(400, json.dumps({"error": "Bad request. Required metadata header."}))
        elif self.path.startswith("/metadata/instance/compute/vmId?"):
            self._reply(200, "02aab8a4-74ef-476e-8182-f6d2ba4166a6")
        elif self.path.startswith("/metadata/instance/compute/name?"):
            self._reply(200, "node1")
        elif self.path == "/metadata/scheduledevents?api-version=2020-07-01":
            events = [AZURE_EVENT] if cloud.notice else []
            events += [AZURE_NEIGHBOUR] if cloud.neighbour_notice else []
            self._reply(200, json.dumps({"DocumentIncarnation": 1, "Events": events}))
        else:
            self._reply(404, "")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cloud: CloudStandIn, address: tuple[str, int]) -> None:
        self.cloud = cloud
        super().__init__(address, _Handler)


class CloudStandIn:
    """``with CloudStandIn("gcp") as cloud:`` serves at ``cloud.url`` until the block ends."""

    def __init__(self, provider: str, token_service: bool = True, host: str = "127.0.0.1",
                 port: int = 0, notice_file: str = "") -> None:  # fmt: skip
        self.provider = provider
        self.token_service = token_service
        self._notice = False
        self.notice_file = notice_file  # a notice is posted while this file exists
        self.neighbour_notice = False  # azure: an event for another VM
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self._server = _Server(self, (host, port))
        self.url = f"http://{host}:{self._server.server_address[1]}"

    @property
    def notice(self) -> bool:
        return self._notice or bool(self.notice_file and os.path.exists(self.notice_file))

    @notice.setter
    def notice(self, value: bool) -> None:
        self._notice = value

    def new_token(self) -> str:
        token = f"token-{len(self.tokens) + 1}"
        self.tokens.add(token)
        return token

    def __enter__(self) -> CloudStandIn:
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


# While it serves inside a VM, this record says where and how to post a notice; the preempt
# drill (plugins/module_utils/drill.py) reads it, and only drills a notice it can post here.
RECORD = "/run/nodeprep/metadata-standin.json"


def serve(provider: str, host: str, port: int, notice_file: str, record: str = RECORD) -> None:
    """Serve until SIGTERM; the record exists while it does."""
    standin = CloudStandIn(provider, host=host, port=port, notice_file=notice_file)
    os.makedirs(os.path.dirname(record), exist_ok=True)
    if notice_file:  # the record names it: whoever posts a notice writes it there
        os.makedirs(os.path.dirname(os.path.abspath(notice_file)), exist_ok=True)
    with open(record + ".tmp", "w", encoding="utf-8") as handle:
        json.dump({"provider": provider, "url": standin.url, "notice_file": notice_file,
                   "pid": os.getpid(), "fake": True}, handle)  # fmt: skip
    os.replace(record + ".tmp", record)

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        standin._server.serve_forever(poll_interval=0.05)
    finally:
        for path in (record, notice_file):
            if path and os.path.exists(path):
                os.unlink(path)


if __name__ == "__main__":  # inside a lab VM: python3 cloud_standin.py aws HOST PORT NOTICE_FILE
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
