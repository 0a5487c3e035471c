"""Load and validate the daemon's JSON config; every error names the key that caused it.

The role renders this file with ``to_nice_json`` and runs ``--check-config`` on it before
it replaces the live one, so the messages here are what an operator sees on a bad change.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeprep import contract
from nodeprep.heartbeat import cloud_metadata
from nodeprep.heartbeat.volume_grow import GCE_NAME, VOLUME_ID

PROBE_TYPES = (
    "http", "imds", "spot_notice", "tcp", "icmp", "writable", "free_space", "gpu", "progress",
)  # fmt: skip
# Probes that ask something over the network: their attempts are hedged and retried soon.
NETWORK_PROBES = ("http", "imds", "spot_notice", "tcp", "icmp")
DEFAULT_METADATA_URL = cloud_metadata.DEFAULT_URL
# Signals a hang may escalate through (each after hang.grace_s if the trainer still lives).
HANG_SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")


class ConfigError(ValueError):
    """A config value is wrong; ``str()`` is one sentence naming the key and the fix."""


@dataclass(frozen=True)
class ProbeConfig:
    """One probe: common scheduling fields plus the type-specific ones it uses."""

    name: str
    type: str
    interval: float
    timeout: float
    fail_threshold: int
    recover_threshold: int
    # Network probes: an unanswered attempt is hedged by another this long after it started,
    # and a failure that has not tripped is retried this soon (see scheduler.py). Other
    # probes default to their interval: a GPU reading or a disk check is not hurried.
    retry_interval: float = 0.0
    url: str = ""
    expect_status: tuple[int, ...] = (200,)
    host: str = ""
    port: int = 0
    path: str = ""
    token_ttl: int = 21600
    provider: str = "aws"  # imds, spot_notice: whose metadata service (cloud_metadata)
    max_temp_c: float = 85.0
    max_memory_ratio: float = 0.99
    min_utilization_ratio: float | None = None
    max_ecc_uncorrected: int = 0
    # progress: a trainer is hung after no step for factor x its median step, clamped to
    # [floor_s, ceiling_s]; at least startup_s / checkpoint_s in those phases.
    factor: float = 10.0
    floor_s: float = 30.0
    ceiling_s: float = 600.0
    startup_s: float = 600.0
    checkpoint_s: float = 300.0
    loss_spike_factor: float = 10.0  # a loss above this x its recent median is a spike (0: off)
    # free_space: levels by percent of the filesystem or absolute bytes; fill rate window
    warn_percent: float = 10.0
    critical_percent: float = 5.0
    warn_bytes: int = 0
    critical_bytes: int = 0
    window_s: float = 300.0


@dataclass(frozen=True)
class HangConfig:
    """What to do with the trainers a progress probe finds hung, in this order."""

    dump_stacks: bool = True
    dump_wait_s: float = 2.0
    signals: tuple[str, ...] = ("SIGTERM", "SIGKILL")
    grace_s: float = 30.0


@dataclass(frozen=True)
class ActionsConfig:
    """What to do when a probe fails or a notice arrives."""

    signal_trainers: bool = True
    pause_trainers: bool = False
    pause_wait_s: float = 60.0
    min_trip_interval_s: float = 30.0
    tmux_session: str | None = None
    tmux_socket: str | None = None
    tmux_keys: tuple[str, ...] = ("C-c",)
    webhook_url: str | None = None
    webhook_timeout_s: float = 2.0
    hang: HangConfig = field(default_factory=HangConfig)


@dataclass(frozen=True)
class GrowVolume:
    """One volume the growth action may grow (``grow.volumes[i]``)."""

    path: str  # a directory on the volume's filesystem (matched to a free_space probe)
    step_gb: int
    max_gb: int
    volume_id: str = ""  # aws: the EBS volume
    disk: str = ""  # gcp: the persistent disk's name
    project: str | None = None  # gcp: else the metadata server's
    zone: str | None = None  # gcp: else the metadata server's
    metadata_url: str = DEFAULT_METADATA_URL  # gcp: where the service account's token comes from
    provider: str = "aws"
    region: str | None = None
    endpoint_url: str | None = None
    device: str | None = None  # the disk, where no /dev/disk/by-id link carries the id
    when_s: float = 3600.0  # ask for growth when the disk is projected full within this
    cooldown_hours: float = 6.0
    api_wait_s: float = 900.0
    kernel_wait_s: float = 120.0

    @property
    def name(self) -> str:
        """The volume as its provider names it: the EBS id, or the GCP disk's name."""
        return self.volume_id or self.disk


@dataclass(frozen=True)
class GrowConfig:
    """The growth action: which volumes, and where daemon and root helper exchange files."""

    volumes: tuple[GrowVolume, ...] = ()
    request_dir: str = "/run/nodeprep/heartbeat-grow"
    state_dir: str = "/var/lib/nodeprep/volume-grow"
    answer_timeout_s: float = 1800.0
    retry_s: float = 600.0


@dataclass(frozen=True)
class Config:
    """The whole daemon configuration."""

    probes: tuple[ProbeConfig, ...]
    actions: ActionsConfig = field(default_factory=ActionsConfig)
    metrics_path: Path | None = None
    metrics_interval_s: float = 5.0
    registry_dir: Path = field(default_factory=contract.registry_dir)
    grow: GrowConfig = field(default_factory=GrowConfig)


class _Section:
    """A dict being read under a key path; unread keys are reported as unknown."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}.")
        self.data: dict[str, Any] = data
        self.where = where
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        self.seen.add(name)
        value = self.data.get(name, default)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        bool_ok = bool in kinds or not isinstance(value, bool)
        if value is None or (isinstance(value, kinds) and bool_ok):
            return value
        names = " or ".join(k.__name__ for k in kinds)
        raise ConfigError(f"{self.key(name)}: expected {names}, got {value!r}.")

    def positive(self, name: str, default: float) -> float:
        value = float(self.get(name, (int, float), default))
        if value <= 0:
            raise ConfigError(f"{self.key(name)}: must be a positive number, got {value:g}.")
        return value

    def count(self, name: str, default: int) -> int:
        value = int(self.get(name, int, default))
        if value < 1:
            raise ConfigError(f"{self.key(name)}: must be an integer of 1 or more, got {value}.")
        return value

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise ConfigError(
                f"{self.key(unknown[0])}: unknown key; remove it or fix its spelling."
            )


def _probe(raw: object, where: str) -> ProbeConfig:
    sec = _Section(raw, where)
    kind = sec.get("type", str)
    if kind not in PROBE_TYPES:
        raise ConfigError(
            f"{sec.key('type')}: unknown probe type {kind!r}; use one of {', '.join(PROBE_TYPES)}."
        )
    name = sec.get("name", str) or ""
    if not name:
        raise ConfigError(f"{sec.key('name')}: every probe needs a non-empty name.")
    interval = sec.positive("interval", 5.0)
    timeout = sec.positive("timeout", min(2.0, interval))
    if timeout > interval:
        raise ConfigError(
            f"{sec.key('timeout')}: {timeout:g} s exceeds the interval {interval:g} s."
        )
    quick = min(interval, max(0.05, timeout / 3))
    retry = sec.positive("retry_interval", quick if kind in NETWORK_PROBES else interval)
    if retry > interval:
        raise ConfigError(
            f"{sec.key('retry_interval')}: {retry:g} s exceeds the interval {interval:g} s; "
            "a retry comes sooner than the next interval, or it is no retry."
        )
    common: dict[str, Any] = {
        "name": name,
        "type": kind,
        "interval": interval,
        "timeout": timeout,
        "retry_interval": retry,
        # A progress probe's allowance already is its patience: one late reading is a hang.
        "fail_threshold": sec.count("fail_threshold", 1 if kind == "progress" else 3),
        "recover_threshold": sec.count("recover_threshold", 2),
    }
    common.update(_TYPED[kind](sec))
    sec.finish()
    return ProbeConfig(**common)


def _http_fields(sec: _Section) -> dict[str, Any]:
    url = sec.get("url", str)
    if not url or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{sec.key('url')}: needs an http:// or https:// URL, got {url!r}.")
    statuses = sec.get("expect_status", (int, list), 200)
    statuses = [statuses] if isinstance(statuses, int) else statuses
    if not statuses or not all(isinstance(s, int) and 100 <= s <= 599 for s in statuses):
        raise ConfigError(
            f"{sec.key('expect_status')}: must be HTTP status codes, got {statuses!r}."
        )
    return {"url": url, "expect_status": tuple(statuses)}


def _metadata_fields(sec: _Section) -> dict[str, Any]:
    url = sec.get("url", str, DEFAULT_METADATA_URL)
    if not url.startswith("http://"):
        raise ConfigError(f"{sec.key('url')}: the metadata service is plain http://, got {url!r}.")
    provider = sec.get("provider", str, "aws")
    if provider not in cloud_metadata.PROVIDERS:
        raise ConfigError(
            f"{sec.key('provider')}: unknown provider {provider!r}; use one of "
            f"{', '.join(cloud_metadata.PROVIDERS)}."
        )
    fields: dict[str, Any] = {"url": url.rstrip("/"), "provider": provider,
                              "token_ttl": sec.count("token_ttl", 21600)}  # fmt: skip
    if sec.data.get("type") == "imds":
        path = sec.get("path", str, cloud_metadata.DEFAULT_PATHS[provider])
        if not path.startswith("/"):
            raise ConfigError(f"{sec.key('path')}: needs a path that starts with /, got {path!r}.")
        fields["path"] = path
    return fields


def _tcp_fields(sec: _Section) -> dict[str, Any]:
    host = sec.get("host", str)
    port = sec.get("port", int)
    if not host:
        raise ConfigError(f"{sec.key('host')}: a tcp probe needs a host name or address.")
    if port is None or not 0 < port < 65536:
        raise ConfigError(f"{sec.key('port')}: must be a TCP port 1-65535, got {port!r}.")
    return {"host": host, "port": port}


def _icmp_fields(sec: _Section) -> dict[str, Any]:
    host = sec.get("host", str)
    if not host:
        raise ConfigError(f"{sec.key('host')}: an icmp probe needs a host name or address.")
    return {"host": host}


def _writable_fields(sec: _Section) -> dict[str, Any]:
    path = sec.get("path", str)
    if not path or not Path(path).is_absolute():
        raise ConfigError(f"{sec.key('path')}: needs an absolute directory path, got {path!r}.")
    return {"path": path}


def _free_space_fields(sec: _Section) -> dict[str, Any]:
    fields = _writable_fields(sec)
    fields["window_s"] = sec.positive("window_s", 300.0)
    for key, default in (("warn_percent", 10.0), ("critical_percent", 5.0)):
        value = float(sec.get(key, (int, float), default))
        if not 0 <= value <= 100:
            raise ConfigError(f"{sec.key(key)}: must be a percentage 0-100, got {value:g}.")
        fields[key] = value
    for key in ("warn_bytes", "critical_bytes"):
        value = int(sec.get(key, int, 0))
        if value < 0:
            raise ConfigError(f"{sec.key(key)}: must be 0 (off) or a number of bytes, got {value}.")
        fields[key] = value
    for unit in ("percent", "bytes"):
        critical, warn = fields[f"critical_{unit}"], fields[f"warn_{unit}"]
        if warn and critical > warn:  # a warning level of 0 is off: nothing to be below
            raise ConfigError(
                f"{sec.key('critical_' + unit)}: {critical:g} is above warn_{unit} {warn:g}; "
                "the critical level is the smaller free space."
            )
    return fields


def _gpu_fields(sec: _Section) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "max_temp_c": sec.positive("max_temp_c", 85.0),
        "max_memory_ratio": sec.positive("max_memory_ratio", 0.99),
        "max_ecc_uncorrected": int(sec.get("max_ecc_uncorrected", int, 0)),
    }
    util = sec.get("min_utilization_ratio", (int, float))
    fields["min_utilization_ratio"] = None if util is None else float(util)
    return fields


def _progress_fields(sec: _Section) -> dict[str, Any]:
    fields = {
        key: sec.positive(key, default)
        for key, default in (("factor", 10.0), ("floor_s", 30.0), ("ceiling_s", 600.0),
                             ("startup_s", 600.0), ("checkpoint_s", 300.0))
    }  # fmt: skip
    spike = sec.get("loss_spike_factor", (int, float), 10.0)
    if spike < 0:
        raise ConfigError(f"{sec.key('loss_spike_factor')}: must be 0 (off) or more, got {spike}.")
    fields["loss_spike_factor"] = float(spike)
    if fields["floor_s"] > fields["ceiling_s"]:
        raise ConfigError(
            f"{sec.key('floor_s')}: {fields['floor_s']:g} s exceeds ceiling_s "
            f"{fields['ceiling_s']:g} s; the floor must not be above the ceiling."
        )
    return fields


_TYPED = {
    "http": _http_fields,
    "imds": _metadata_fields,
    "spot_notice": _metadata_fields,
    "tcp": _tcp_fields,
    "icmp": _icmp_fields,
    "writable": _writable_fields,
    "free_space": _free_space_fields,
    "gpu": _gpu_fields,
    "progress": _progress_fields,
}


def _actions(raw: object) -> ActionsConfig:
    sec = _Section(raw, "actions")
    tmux = _Section(sec.get("tmux", dict, {}), "actions.tmux")
    hook = _Section(sec.get("webhook", dict, {}), "actions.webhook")
    hang = _hang(sec.get("hang", dict, {}))
    keys = tmux.get("keys", list, ["C-c"])
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ConfigError(f"{tmux.key('keys')}: must be a list of tmux key names, got {keys!r}.")
    url = hook.get("url", str)
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError(f"{hook.key('url')}: needs an http:// or https:// URL, got {url!r}.")
    actions = ActionsConfig(
        signal_trainers=bool(sec.get("signal_trainers", bool, True)),
        pause_trainers=bool(sec.get("pause_trainers", bool, False)),
        pause_wait_s=sec.positive("pause_wait_s", 60.0),
        min_trip_interval_s=float(sec.get("min_trip_interval_s", (int, float), 30.0)),
        tmux_session=tmux.get("session", str),
        tmux_socket=tmux.get("socket", str),
        tmux_keys=tuple(keys),
        webhook_url=url,
        webhook_timeout_s=hook.positive("timeout_s", 2.0),
        hang=hang,
    )
    for section in (tmux, hook, sec):
        section.finish()
    return actions


def _hang(raw: object) -> HangConfig:
    sec = _Section(raw, "actions.hang")
    signals = sec.get("signals", list, ["SIGTERM", "SIGKILL"])
    if not all(isinstance(name, str) and name in HANG_SIGNALS for name in signals):
        raise ConfigError(
            f"{sec.key('signals')}: must list signals among {', '.join(HANG_SIGNALS)} (or be "
            f"empty: dump stacks only), got {signals!r}."
        )
    hang = HangConfig(
        dump_stacks=bool(sec.get("dump_stacks", bool, True)),
        dump_wait_s=sec.positive("dump_wait_s", 2.0),
        signals=tuple(signals),
        grace_s=sec.positive("grace_s", 30.0),
    )
    sec.finish()
    return hang


GROW_PROVIDERS = ("aws", "gcp")


def _grow(raw: object) -> GrowConfig:
    sec = _Section(raw, "grow")
    volumes = []
    for index, item in enumerate(sec.get("volumes", list, [])):
        volumes.append(_grow_volume(item, f"grow.volumes[{index}]"))
    for key in ("path", "name"):
        seen = [getattr(v, key) for v in volumes]
        for index, value in enumerate(seen):
            if value in seen[:index]:
                field = (
                    "path" if key == "path" else ("disk" if volumes[index].disk else "volume_id")
                )
                raise ConfigError(f"grow.volumes[{index}].{field}: {value} is listed twice.")
    dirs = {}
    for key, default in (("request_dir", GrowConfig.request_dir),
                         ("state_dir", GrowConfig.state_dir)):  # fmt: skip
        value = sec.get(key, str, default)
        if not value or not Path(value).is_absolute():
            raise ConfigError(f"{sec.key(key)}: needs an absolute directory path, got {value!r}.")
        dirs[key] = value
    request, state = Path(dirs["request_dir"]), Path(dirs["state_dir"])
    if request == state or request in state.parents or state in request.parents:
        raise ConfigError(
            "grow.state_dir: must not be inside grow.request_dir or hold it: the daemon may "
            "write in the one, only root in the other."
        )
    # The daemon must wait longer than the helper may take (its unit's TimeoutStartSec),
    # or it would give up on an answer still coming and ask again.
    longest = 300.0 + sum(v.api_wait_s + v.kernel_wait_s for v in volumes)
    answer_timeout = sec.positive("answer_timeout_s", max(1800.0, longest + 60))
    if answer_timeout <= longest:
        raise ConfigError(
            f"grow.answer_timeout_s: {answer_timeout:g} s is not more than the helper may take "
            f"({longest:g} s: 300 plus every volume's api_wait_s and kernel_wait_s); raise it."
        )
    grow = GrowConfig(
        volumes=tuple(volumes),
        answer_timeout_s=answer_timeout,
        retry_s=sec.positive("retry_s", 600.0),
        **dirs,
    )
    sec.finish()
    return grow


def _grow_volume(raw: object, where: str) -> GrowVolume:
    sec = _Section(raw, where)
    path = sec.get("path", str)
    if not path or not Path(path).is_absolute():
        raise ConfigError(f"{sec.key('path')}: needs an absolute directory path, got {path!r}.")
    provider = sec.get("provider", str, "aws")
    if provider not in GROW_PROVIDERS:
        raise ConfigError(
            f"{sec.key('provider')}: the growth action grows {', '.join(GROW_PROVIDERS)} "
            f"volumes, not {provider!r}; grow it by hand or with roles/volume_grow."
        )
    ids = _grow_ids(sec, provider)
    step, top = sec.count("step_gb", 0), sec.count("max_gb", 0)
    if top < step:
        raise ConfigError(
            f"{sec.key('max_gb')}: {top} GiB is below step_gb {step}; the maximum is the "
            "largest size the volume may reach."
        )
    endpoint = sec.get("endpoint_url", str)
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(
            f"{sec.key('endpoint_url')}: needs an http:// or https:// URL, got {endpoint!r}."
        )
    device = sec.get("device", str)
    if device is not None and not device.startswith("/dev/"):
        raise ConfigError(f"{sec.key('device')}: needs a /dev/ path of a disk, got {device!r}.")
    cooldown = float(sec.get("cooldown_hours", (int, float), 6.0))
    if cooldown < 0:
        raise ConfigError(f"{sec.key('cooldown_hours')}: must be 0 or more, got {cooldown:g}.")
    volume = GrowVolume(
        path=path,
        **ids,
        step_gb=step,
        max_gb=top,
        provider=provider,
        region=sec.get("region", str),
        endpoint_url=endpoint,
        device=device,
        when_s=sec.positive("when_s", 3600.0),
        cooldown_hours=cooldown,
        api_wait_s=sec.positive("api_wait_s", 900.0),
        kernel_wait_s=sec.positive("kernel_wait_s", 120.0),
    )
    sec.finish()
    return volume


def _grow_ids(sec: _Section, provider: str) -> dict[str, Any]:
    """How the provider names the volume: an EBS id, or a GCP disk (project, zone, metadata)."""
    mine = ("volume_id",) if provider == "aws" else ("disk", "project", "zone", "metadata_url")
    for key in ("volume_id", "disk", "project", "zone", "metadata_url"):
        if key not in mine and key in sec.data:
            raise ConfigError(f"{sec.key(key)}: not a key of provider {provider}; remove it.")
    if provider == "aws":
        volume_id = sec.get("volume_id", str) or ""
        if not VOLUME_ID.match(volume_id):
            raise ConfigError(
                f"{sec.key('volume_id')}: {volume_id!r} is not an EBS volume id; ids look like "
                "vol-0123456789abcdef0."
            )
        if not sec.data.get("region"):
            raise ConfigError(
                f"{sec.key('region')}: an EBS volume needs its region (boto3 on the node has "
                "no default), for example eu-west-1."
            )
        return {"volume_id": volume_id}
    found: dict[str, Any] = {}
    for key in ("disk", "zone"):
        value = sec.get(key, str)
        if (key == "disk" or value is not None) and not GCE_NAME.match(value or ""):
            raise ConfigError(
                f"{sec.key(key)}: {value!r} is not a GCE {key} name; names are lower-case "
                "letters, digits and dashes, starting with a letter."
            )
        found[key] = value
    found["project"] = sec.get("project", str)
    url = sec.get("metadata_url", str, DEFAULT_METADATA_URL)
    if not url.startswith("http://"):
        raise ConfigError(f"{sec.key('metadata_url')}: the metadata server is plain http://.")
    found["metadata_url"] = url.rstrip("/")
    return found


def parse(data: object, check_paths: bool = True) -> Config:
    """Validate a decoded config document.

    ``check_paths=False`` judges only the document, not this machine's directories: the
    controller validates a node's config before the node has them.
    """
    top = _Section(data, "")
    raw_probes = top.get("probes", list)
    if not raw_probes:
        raise ConfigError("probes: list at least one probe.")
    probes = tuple(_probe(raw, f"probes[{i}]") for i, raw in enumerate(raw_probes))
    names = [p.name for p in probes]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"probes[{i}].name: {name!r} is used twice; names must be unique.")
    metrics = _Section(top.get("metrics", dict, {}), "metrics")
    metrics_path = metrics.get("path", str)
    if check_paths:
        _check_directories(probes, metrics_path)
    registry = top.get("registry_dir", str)
    grow = _grow(top.get("grow", dict, {}))
    if check_paths:
        _check_grow(probes, grow)
    config = Config(
        probes=probes,
        actions=_actions(top.get("actions", dict, {})),
        metrics_path=Path(metrics_path) if metrics_path else None,
        metrics_interval_s=metrics.positive("interval_s", 5.0),
        registry_dir=Path(registry) if registry else contract.registry_dir(),
        grow=grow,
    )
    metrics.finish()
    top.finish()
    return config


def _check_directories(probes: tuple[ProbeConfig, ...], metrics_path: str | None) -> None:
    """The directories the config names must exist on the machine that runs the daemon."""
    for index, probe in enumerate(probes):
        if probe.type in ("writable", "free_space") and not Path(probe.path).is_dir():
            raise ConfigError(
                f"probes[{index}].path: {probe.path} is not a directory; create it or fix the path."
            )
    if metrics_path is not None and not Path(metrics_path).parent.is_dir():
        raise ConfigError(
            f"metrics.path: directory {Path(metrics_path).parent} does not exist; create it first."
        )


def _check_grow(probes: tuple[ProbeConfig, ...], grow: GrowConfig) -> None:
    """Every growable volume's path exists and a free_space probe watches its filesystem."""
    watched = set()
    for probe in probes:
        if probe.type == "free_space":
            with contextlib.suppress(OSError):
                watched.add(os.stat(probe.path).st_dev)
    for index, volume in enumerate(grow.volumes):
        where = f"grow.volumes[{index}].path"
        try:
            dev = os.stat(volume.path).st_dev
        except OSError as err:
            raise ConfigError(f"{where}: {volume.path}: {err.strerror}; fix the path.") from err
        if dev not in watched:
            raise ConfigError(
                f"{where}: no free_space probe watches the filesystem of {volume.path}; "
                "add one on that path, or the growth action never sees it fill."
            )


def load(path: Path) -> Config:
    """Read and validate the config file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror}).") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON at line {err.lineno}: {err.msg}.") from err
    return parse(data)
