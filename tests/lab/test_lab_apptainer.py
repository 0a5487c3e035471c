"""The apptainer role on a lab VM (Debian 13, no internet): install from checksummed .debs
served by the host, copy the image, run it; a second run changes nothing; wrong checksums
fail clearly and change nothing; the verify checks read the node's real state, and the smoke
drill finds the image through the role's marker."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from lab_apptainer_helpers import (
    PlayRun,
    forward_to_guest,
    guest_debs,
    package_files,
    provision,
    run_play,
)
from lab_helpers import LabNode

from image_testbed import SLIM_IMAGE, apptainer, build_image
from nodeprep.lab.fileserve import serve_directory

pytestmark = pytest.mark.lab
DEST = "/opt/nodeprep/images/nodeprep-slim.sif"
CACHE = "/var/cache/nodeprep/apptainer"


@pytest.fixture(scope="module")
def slim_image() -> tuple[Path, str]:
    """The torch-less image; the integration tier usually built it already (then: skipped)."""
    done = build_image(apptainer(), SLIM_IMAGE)
    assert done.returncode == 0, done.stdout + done.stderr
    return SLIM_IMAGE, hashlib.sha256(SLIM_IMAGE.read_bytes()).hexdigest()


def test_role_installs_copies_runs_and_second_run_changes_nothing(
    lab_node: LabNode, slim_image: tuple[Path, str], tmp_path: Path
) -> None:
    image, image_sha256 = slim_image
    debs = guest_debs(lab_node.sh("cat /var/lib/dpkg/status", timeout_s=240))
    written = lab_node.cli("inventory", "--output", str(tmp_path / "lab.ini"))
    assert written.returncode == 0, written.stderr
    inventory = Path(written.stdout.strip())
    with serve_directory(debs[0].parent) as port:
        forward_to_guest(inventory, port)
        files = package_files(debs)
        good = {
            "apptainer_package_files": files,
            "apptainer_image_src": str(image),
            "apptainer_image_sha256": image_sha256,
            "apptainer_image_dest": DEST,
            "apptainer_conf_settings": {"root default capabilities": "no"},
            "apptainer_check_command": "python -c 'import nodeprep'",
        }

        def play(variables: dict[str, object], tags: str = "converge,verify") -> PlayRun:
            return run_play(inventory, lab_node.env, variables, tags, tmp_path)

        assert debs[0].name.startswith("apptainer_")
        wrong = [dict(files[0], sha256="0" * 64), *files[1:]]
        refused = play({**good, "apptainer_package_files": wrong}, tags="converge")
        assert refused.rc != 0
        assert "did not match" in refused.messages(), refused.raw
        assert lab_node.sh("command -v apptainer || echo absent").strip() == "absent"
        assert (
            lab_node.sh(f"ls {CACHE} 2>/dev/null | grep -c {debs[0].name} || true").strip() == "0"
        )

        # The first converge as a user runs it: `nodeprep provision`, whose playbook applies
        # the role because an image is given (--tags apptainer leaves the other roles out).
        first = provision(inventory, lab_node.env, good, tmp_path)
        assert first["exit_code"] == 0, first
        assert first["hosts"]["node1"]["changed"] > 0, first
        second = play(good)
        assert second.rc == 0, second.raw
        assert second.changed == 0, second.raw

    checks = second.checks()
    assert {name: c["status"] for name, c in checks.items()} == {
        "apptainer.present": "pass", "apptainer.image_hash": "pass", "apptainer.runs": "pass",
        "smoke.drill": "skip",
    }, checks  # fmt: skip
    # The drill looked for torch in the image the role recorded (this one has none).
    assert f"apptainer exec {DEST} cannot import torch" in checks["smoke.drill"]["detail"], checks
    assert lab_node.sh(f"sha256sum {DEST}").split()[0] == image_sha256
    assert "root default capabilities = no" in lab_node.sh("cat /etc/apptainer/apptainer.conf")
    marker = lab_node.sh("cat /etc/nodeprep/roles/apptainer.json")
    assert f'"image_sha256": "{image_sha256}"' in marker
    ran = lab_node.sh(
        f"apptainer exec {DEST} python -c 'import nodeprep; print(nodeprep.__version__)'"
    )
    assert ran.strip() == "0.1.0"

    mismatch = play({**good, "apptainer_image_sha256": "f" * 64}, tags="apptainer_image")
    assert mismatch.rc != 0
    assert "nothing was copied" in mismatch.messages(), mismatch.raw
    assert lab_node.sh(f"sha256sum {DEST}").split()[0] == image_sha256
