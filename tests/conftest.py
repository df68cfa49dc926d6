"""Shared test fixtures: paths to the bundled example and to ../shared/data (skipped with a reason if absent), a
seeded generator, and a local OpenAI-protocol stub server."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SHARED_DATA = Path(os.environ.get("BENCHFILL_SHARED", REPO.parent / "shared")) / "data"


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data not found at {SHARED_DATA}: extended real-data test skipped")
    return SHARED_DATA


@pytest.fixture(scope="session")
def real_shapes_data(shared_data: Path) -> Path:
    """../shared/data where it holds the ~1,100-rollout matrices (its ``real`` folder) the real-shape truths are
    fitted from (tests/real_shapes.py); the test is skipped with the reason where it does not."""
    if not (shared_data / "real").is_dir():
        pytest.skip(f"{shared_data / 'real'} not found: real-shape truths skipped")
    return shared_data


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def stub():
    """A local OpenAI-protocol server on 127.0.0.1 with the default responder (tests/openai_stub.py)."""
    from openai_stub import start_stub

    server = start_stub()
    yield server
    server.stop()
