"""The committed protobuf/gRPC code under common/v1/ is what protos/ generates today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_matches_the_protos() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "deploy" / "gen_protos.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "generated code is current" in done.stdout


def test_public_surface_is_pinned() -> None:
    import sparkyard

    assert sorted(sparkyard.__all__) == sorted([
        "Client", "FailedPrecondition", "InvalidArgument", "NotFound", "PermissionDenied", "Pipeline", "SparkyardError",
        "Unauthenticated", "Unavailable", "__version__",
    ])
    for name in sparkyard.__all__:
        assert getattr(sparkyard, name) is not None
