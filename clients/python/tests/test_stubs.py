"""The shipped gRPC stubs are those generate.sh makes from proto/*.proto."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent.parent
SHIPPED = HERE / "src" / "tenure" / "_proto"
PROTO = HERE.parent.parent / "proto"


def normalize(text: str) -> str:
    """The generated text without the generator's own version stamps (another
    grpcio-tools makes the same stubs with other stamps)."""
    text = re.sub(r"# Protobuf Python Version: .*\n", "", text)
    text = re.sub(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)",
                  "_runtime_version.ValidateProtobufRuntimeVersion(...)", text)
    text = re.sub(r"GRPC_GENERATED_VERSION = '[^']*'", "GRPC_GENERATED_VERSION = '...'", text)
    return text


def test_shipped_stubs_are_up_to_date(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed")
    if not PROTO.is_dir():
        pytest.skip(f"no proto directory at {PROTO}")
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run generate.sh")
    out = tmp_path / "gen"
    r = subprocess.run(["bash", str(HERE / "generate.sh"), str(out)], capture_output=True,
                       text=True, timeout=120, env={"PYTHON": sys.executable,
                                                    "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    made = sorted(p.name for p in out.iterdir() if p.name != "__init__.py")
    shipped = sorted(p.name for p in SHIPPED.iterdir()
                     if p.is_file() and p.name != "__init__.py")
    assert made == shipped, "generate.sh makes other files than the shipped ones"
    stale = [name for name in made
             if normalize((out / name).read_text()) != normalize((SHIPPED / name).read_text())]
    assert not stale, (f"the shipped stubs {stale} are not up to date with proto/: run "
                       "clients/python/generate.sh")


def test_the_stubs_import_inside_the_package():
    from tenure._proto import elections_pb2, elections_pb2_grpc, tenure_pb2, tenure_pb2_grpc

    # elections.proto imports tenure.proto: the relative import resolved to the package's.
    assert elections_pb2.LeaderInfo.DESCRIPTOR.fields_by_name["token"].message_type \
        is tenure_pb2.FencingToken.DESCRIPTOR
    assert hasattr(tenure_pb2_grpc, "ObjectsStub") and hasattr(elections_pb2_grpc, "ElectionsStub")
    assert "Watch" in tenure_pb2.DESCRIPTOR.services_by_name["Objects"].methods_by_name
