"""distro_package reads what apt would install and whether it is new enough: apt-cache's
own output parsed, and one real call on this machine (a Debian, as CI is) for dpkg, which
every Debian has installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collection_plugins import load
from nodeprep import paths

package = load("distro_package")
versions = package.upstream_version

POLICY_TRIXIE = """tmux:
  Installed: (none)
  Candidate: 3.5a-3
  Version table:
     3.5a-3 500
        500 http://deb.debian.org/debian trixie/main amd64 Packages
"""
POLICY_OFFLINE = """tmux:
  Installed: 3.3a-3
  Candidate: 3.3a-3
  Version table:
 *** 3.3a-3 100
        100 /var/lib/dpkg/status
"""
POLICY_UNKNOWN = "N: Unable to locate package tmux\n"


@pytest.mark.parametrize(
    ("version", "upstream"),
    [("3.5a-3", "3.5a"), ("1:2.9-1ubuntu0.2", "2.9"), ("3.3a-3+deb12u1", "3.3a"),
     ("2.8", "2.8"), ("3.4+dfsg-1~bpo12+1", "3.4"), ("1:1.2.3-4-5", "1.2.3-4")],
)  # fmt: skip
def test_the_upstream_release_is_read_out_of_debians_version(version: str, upstream: str) -> None:
    assert versions(version) == upstream


def test_the_candidate_decides_and_the_installed_version_serves_offline() -> None:
    online = package.judge(package.apt_policy(POLICY_TRIXIE), "2.9")
    assert online == {"installed": None, "candidate": "3.5a-3", "upstream_version": "3.5a",
                      "meets_minimum": True}  # fmt: skip
    offline = package.judge(package.apt_policy(POLICY_OFFLINE), "3.5")
    assert offline["upstream_version"] == "3.3a"
    assert offline["meets_minimum"] is False
    assert package.judge(package.apt_policy(POLICY_OFFLINE), "3.3a")["meets_minimum"] is True


def test_a_package_apt_does_not_know_does_not_meet_any_minimum() -> None:
    unknown = package.judge(package.apt_policy(POLICY_UNKNOWN), "")
    assert unknown == {"installed": None, "candidate": None, "upstream_version": None,
                       "meets_minimum": False}  # fmt: skip


def test_the_module_reads_this_machines_dpkg(tmp_path: Path) -> None:
    assert shutil.which("apt-cache"), "this test needs a Debian machine, as CI is"
    installed = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "dpkg"], capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    collections = paths.link_collection(tmp_path / "collections")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}  # fmt: skip
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local",
         "-m", "nodeprep.hardening.distro_package", "-a", "name=dpkg min_version=1.0",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["manager"] == "apt"
    assert result["installed"] == installed
    assert result["meets_minimum"] is True
    assert result["upstream_version"] == versions(result["candidate"] or installed)
