"""Regenerates the committed protobuf/gRPC code under common/v1/ from protos/.

    .venv/bin/python deploy/gen_protos.py            # rewrite common/v1/*_pb2*.py(i)
    .venv/bin/python deploy/gen_protos.py --check    # exit 1 if the committed code is stale

protoc names outputs after the proto's path (sparkyard/v1/x.proto → sparkyard/v1/x_pb2.py), so the code
is generated into a scratch dir and the sparkyard/v1 part is copied to common/v1 (= import sparkyard.v1).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
TARGET = ROOT / "common" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out: Path) -> list[Path]:
    """Run protoc on every .proto under protos/ and return the generated files of package sparkyard.v1."""
    sources = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main([
        "grpc_tools.protoc",
        f"-I{PROTOS}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *sources,
    ])
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    return sorted((out / "sparkyard" / "v1").glob("*"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only verify the committed code is current")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        fresh = [p for p in generate(Path(scratch)) if p.name.endswith(GENERATED_SUFFIXES)]
        committed = sorted(p for p in TARGET.glob("*") if p.name.endswith(GENERATED_SUFFIXES))
        if args.check:
            stale = [p.name for p in fresh if not (TARGET / p.name).exists()
                     or not filecmp.cmp(p, TARGET / p.name, shallow=False)]
            extra = sorted({p.name for p in committed} - {p.name for p in fresh})
            if stale or extra:
                print(f"generated code is stale: {stale + extra}; run deploy/gen_protos.py", file=sys.stderr)
                return 1
            print("generated code is current")
            return 0
        for old in committed:
            old.unlink()
        for p in fresh:
            shutil.copy(p, TARGET / p.name)
            print(f"wrote {(TARGET / p.name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
