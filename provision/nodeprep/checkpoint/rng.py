"""Every random number generator a training step can touch, in a weights-only-loadable form.

``torch.load(weights_only=True)`` accepts tensors and plain containers of
int/float/str/bool/None only, so Python's state stays a tuple of ints and
NumPy's array becomes a tensor.
"""

from __future__ import annotations

import random
from typing import Any

import torch


def capture() -> dict[str, Any]:
    """The current state of Python's, NumPy's (when imported), torch CPU's and every CUDA RNG."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "torch_cpu": torch.get_rng_state(),
        "cuda": [t.cpu() for t in torch.cuda.get_rng_state_all()]
        if torch.cuda.is_available()
        else [],
    }
    numpy_state = _capture_numpy()
    if numpy_state is not None:
        state["numpy"] = numpy_state
    return state


def restore(state: dict[str, Any]) -> None:
    """Put every generator back exactly; a CUDA device count change is an error, not a guess."""
    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in py["state"]), py["gauss"]))
    torch.set_rng_state(state["torch_cpu"])
    cuda_states = list(state.get("cuda", []))
    if cuda_states:
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if available != len(cuda_states):
            raise ValueError(
                f"checkpoint holds RNG state for {len(cuda_states)} CUDA device(s) but this "
                f"process sees {available}; resume with the same visible devices"
            )
        torch.cuda.set_rng_state_all(cuda_states)
    if "numpy" in state:
        _restore_numpy(state["numpy"])


def _capture_numpy() -> dict[str, Any] | None:
    import sys

    if "numpy" not in sys.modules:
        return None
    numpy = sys.modules["numpy"]
    name, keys, pos, has_gauss, cached = numpy.random.get_state(legacy=True)
    return {
        "name": str(name),
        "keys": torch.tensor(keys.astype("int64")),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _restore_numpy(state: dict[str, Any]) -> None:
    import numpy

    keys = state["keys"].numpy().astype(numpy.uint32)
    numpy.random.set_state(
        (state["name"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"])
    )
