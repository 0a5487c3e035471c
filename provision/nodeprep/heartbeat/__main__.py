"""``python -m nodeprep.heartbeat --config FILE`` runs the daemon; ``--check-config FILE``
validates a config and exits (the role runs it before it replaces the live config).

argparse, not click: this runs on nodes where only the standard library is promised.
Exit codes: 0 fine, 2 bad config (one line on stderr naming the key).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from nodeprep.heartbeat import config as config_mod


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodeprep.heartbeat",
        description="Network, cloud-notice and GPU watchdog for training nodes.",
        epilog="examples:\n  python -m nodeprep.heartbeat --config /etc/nodeprep/heartbeat.json\n"
        "  python -m nodeprep.heartbeat --check-config new.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--config", type=Path, help="run the daemon with this JSON config")
    group.add_argument("--check-config", type=Path, metavar="FILE", help="validate and exit")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    path = args.check_config or args.config
    try:
        cfg = config_mod.load(path)
    except config_mod.ConfigError as err:
        print(f"nodeprep-heartbeat: bad config {path}: {err}", file=sys.stderr)
        return 2
    if args.check_config:
        print(f"nodeprep-heartbeat: config {path} is valid ({len(cfg.probes)} probe(s)).")
        return 0
    # journald adds its own timestamps; keep the line to level, logger and message.
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    from nodeprep.heartbeat.daemon import Daemon

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _s, _f: stop.set())
    Daemon(cfg).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
