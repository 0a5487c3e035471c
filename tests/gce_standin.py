"""A FAKE at a true boundary (no GCP account, and no Compute Engine emulator exists): a real
HTTP server on 127.0.0.1 shaped like the few Compute Engine v1 calls a disk resize makes, as
roles/volume_grow calls them (plugins/module_utils/volume_grow.py, ``Gce``).

- every request needs ``Authorization: Bearer <token>`` (else 401, as Google answers);
- ``GET .../projects/P/zones/Z/disks/D``: the disk, or 404 with Google's error document;
- ``POST .../disks/D/resize`` with ``{"sizeGb": "N"}``: 400 below the disk's size (Google
  refuses shrinks itself), else a zone operation, RUNNING; it is DONE, and the disk resized,
  at the first poll;
- ``GET .../zones/Z/operations/O``: that operation;
- ``GET .../aggregated/disks?filter=name = D``: the zones that hold a disk of that name.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROJECT = "nodeprep-test"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._reply(status, {"error": {"code": status, "message": message}})

    def _route(self) -> list[str] | None:
        gce = self.server.gce
        gce.requests.append((self.command, self.path))
        if self.headers.get("Authorization") != f"Bearer {gce.token}":
            self._error(401, "Request had invalid authentication credentials.")
            return None
        path = urllib.parse.urlsplit(self.path).path.split("/")
        # ['', 'compute', 'v1', 'projects', P, ...]
        if path[:4] != ["", "compute", "v1", "projects"] or path[4] != gce.project:
            self._error(403, f"Project {path[4] if len(path) > 4 else '?'} is not accessible.")
            return None
        return path[5:]

    def do_GET(self) -> None:
        gce = self.server.gce
        rest = self._route()
        if rest is None:
            return
        if rest[:1] == ["aggregated"]:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            name = query.get("filter", [""])[0].removeprefix("name = ")
            items = {f"zones/{z}": {"disks": [d]} for (z, n), d in gce.disks.items() if n == name}
            self._reply(200, {"items": items})
        elif len(rest) == 4 and rest[2] == "disks" and (rest[1], rest[3]) in gce.disks:
            self._reply(200, gce.disks[(rest[1], rest[3])])
        elif len(rest) == 4 and rest[2] == "operations" and rest[3] in gce.operations:
            operation = gce.operations[rest[3]]
            if operation["status"] != "DONE":
                zone, name, size = operation.pop("_resize")
                gce.disks[(zone, name)]["sizeGb"] = str(size)
                operation["status"] = "DONE"
            self._reply(200, operation)
        else:
            self._error(404, f"The resource '{self.path}' was not found")

    def do_POST(self) -> None:
        gce = self.server.gce
        rest = self._route()
        if rest is None:
            return
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if len(rest) == 5 and rest[4] == "resize" and (rest[1], rest[3]) in gce.disks:
            disk = gce.disks[(rest[1], rest[3])]
            size = int(body.get("sizeGb", "0"))
            if size < int(disk["sizeGb"]):
                self._error(400, f"Invalid value for field 'sizeGb': '{size}'. Disk size "
                                 f"cannot be smaller than {disk['sizeGb']} GB.")  # fmt: skip
                return
            name = f"operation-{len(gce.operations) + 1}"
            gce.operations[name] = {"name": name, "status": "RUNNING", "operationType": "resize",
                                    "_resize": (rest[1], rest[3], size)}  # fmt: skip
            gce.resizes.append((rest[3], size))
            self._reply(200, {k: v for k, v in gce.operations[name].items() if k[0] != "_"})
        else:
            self._error(404, f"The resource '{self.path}' was not found")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, gce: GceStandIn) -> None:
        self.gce = gce
        super().__init__(("127.0.0.1", 0), _Handler)


class GceStandIn:
    """``with GceStandIn(token) as gce:`` serves on 127.0.0.1; ``gce.url`` is the API base."""

    def __init__(self, token: str, project: str = PROJECT) -> None:
        self.token, self.project = token, project
        self.disks: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.resizes: list[tuple[str, int]] = []
        self._server = _Server(self)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/compute/v1"

    def add_disk(self, zone: str, name: str, size_gb: int, kind: str = "pd-balanced") -> None:
        self.disks[(zone, name)] = {
            "name": name, "sizeGb": str(size_gb), "zone": f"zones/{zone}",
            "type": f"projects/{self.project}/zones/{zone}/diskTypes/{kind}",
        }  # fmt: skip

    def size(self, zone: str, name: str) -> int:
        return int(self.disks[(zone, name)]["sizeGb"])

    def __enter__(self) -> GceStandIn:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
