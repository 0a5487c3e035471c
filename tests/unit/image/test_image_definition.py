"""The trainer image's definition and content hash: what goes in, and what changes the hash."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeprep.image.definition import (
    Base,
    BuildSpec,
    content_hash,
    parse_base,
    render,
    template_text,
)
from nodeprep.image.errors import ImageInputError

DIGEST = "a" * 64


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A minimal tree with the paths a nodeprep wheel is built from."""
    root = tmp_path / "checkout"
    (root / "provision" / "nodeprep").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'nodeprep'\n")
    (root / "provision" / "nodeprep" / "mod.py").write_text("VALUE = 1\n")
    return root


def spec_for(checkout: Path, **changes: object) -> BuildSpec:
    values: dict[str, object] = {
        "base": parse_base("debootstrap:bookworm"),
        "torch": "torch==2.13.0",
        "wheelhouse": None,
        "source": checkout,
    }
    values.update(changes)
    return BuildSpec(**values)  # type: ignore[arg-type]


def test_debootstrap_definition_installs_wheels_and_tests_a_resume(checkout: Path) -> None:
    text = render(spec_for(checkout), template_text(), "f" * 64, "http://mirror/debian", Path("/c"))
    assert text.startswith(
        "Bootstrap: debootstrap\nOSVersion: bookworm\nMirrorURL: http://mirror/debian"
    )
    assert "org.nodeprep.content-hash " + "f" * 64 in text
    assert "org.nodeprep.version 0.1.0" in text
    assert "/c/wheels /opt/nodeprep/wheels" in text
    assert "pip install --no-cache-dir --disable-pip-version-check 'torch==2.13.0'" in text
    test_section = text.split("%test", 1)[1].split("%runscript", 1)[0]
    assert "import torch" in test_section
    # The kill-and-resume drill with one total step count: the trainer's learning-rate
    # schedule spans --steps, so a run stopped by a smaller --steps is a different run.
    assert "python -m nodeprep.smoke" in test_section
    assert "--steps 8 --checkpoint-every 3 --kill-step 5" in test_section
    assert "python -m nodeprep.trainer" not in test_section


def test_wheelhouse_installs_offline_and_no_torch_leaves_it_out(
    checkout: Path, tmp_path: Path
) -> None:
    house = tmp_path / "house"
    spec = spec_for(checkout, wheelhouse=house)
    text = render(spec, template_text(), "0" * 64, "http://m/debian", Path("/c"))
    assert f"{house} /opt/nodeprep/wheelhouse" in text
    assert "--no-index --find-links /opt/nodeprep/wheelhouse" in text
    slim = render(spec_for(checkout, torch=None), template_text(), "0" * 64, "m", Path("/c"))
    assert "'torch" not in slim
    assert "import torch" not in slim
    assert "org.nodeprep.torch none" in slim
    assert "/opt/nodeprep/wheelhouse" not in slim.split("%files", 1)[1].split("%post", 1)[0]


def test_registry_base_is_pinned_by_digest(checkout: Path) -> None:
    base = parse_base(f"docker://pytorch/pytorch@sha256:{DIGEST}")
    assert base == Base("docker", reference=f"pytorch/pytorch@sha256:{DIGEST}")
    text = render(spec_for(checkout, base=base), template_text(), "0" * 64, "", Path("/c"))
    assert text.startswith(f"Bootstrap: docker\nFrom: pytorch/pytorch@sha256:{DIGEST}\n")
    assert "MirrorURL" not in text


@pytest.mark.parametrize(
    "text",
    [
        "docker://pytorch/pytorch:latest",
        f"docker://x@sha256:{DIGEST[:10]}",
        "debootstrap:",
        "ubuntu",
    ],
)
def test_unpinned_or_unknown_base_is_refused(text: str) -> None:
    with pytest.raises(ImageInputError, match="--base") as caught:
        parse_base(text)
    assert "pin the image by digest" in str(caught.value)


def test_hash_is_stable_and_ignores_bytecode_and_mirror(checkout: Path) -> None:
    template = template_text()
    first = content_hash(spec_for(checkout), template)
    cache = checkout / "provision" / "nodeprep" / "__pycache__"
    cache.mkdir()
    (cache / "mod.cpython-311.pyc").write_bytes(b"\0" * 16)
    (checkout / "unrelated.txt").write_text("not in the wheel")
    assert content_hash(spec_for(checkout), template) == first
    # The mirror is a rendering argument, never a hash input.
    assert len(first) == 64


def test_every_input_changes_the_hash(checkout: Path, tmp_path: Path) -> None:
    template = template_text()
    house = tmp_path / "house"
    house.mkdir()
    (house / "torch-2.13.0-cp311.whl").write_bytes(b"wheel-1")
    baseline = content_hash(spec_for(checkout, wheelhouse=house), template)
    seen = {baseline}

    def record(spec: BuildSpec, tmpl: str = template) -> None:
        digest = content_hash(spec, tmpl)
        assert digest not in seen
        seen.add(digest)

    record(spec_for(checkout, wheelhouse=house), template + "\n# changed\n")
    record(spec_for(checkout, wheelhouse=house, base=parse_base("debootstrap:trixie")))
    record(spec_for(checkout, wheelhouse=house, torch="torch==2.12.0"))
    record(spec_for(checkout, wheelhouse=house, torch=None))
    (house / "torch-2.13.0-cp311.whl").write_bytes(b"wheel-2")
    record(spec_for(checkout, wheelhouse=house))
    (checkout / "provision" / "nodeprep" / "mod.py").write_text("VALUE = 2\n")
    record(spec_for(checkout, wheelhouse=house))
    moved = tmp_path / "elsewhere"
    shutil.copytree(checkout, moved)
    # Same bytes at another path: same content, same hash.
    assert content_hash(spec_for(moved, wheelhouse=house), template) in seen
