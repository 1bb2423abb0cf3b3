#!/usr/bin/env bash
# Regenerate the gRPC stubs shipped in src/tenure/_proto from ../../proto/*.proto.
#
#   ./generate.sh            # into src/tenure/_proto
#   ./generate.sh OUT_DIR    # into OUT_DIR (the up-to-date test uses this)
#
# Needs grpcio-tools (pip install grpcio-tools). The generated modules import each other
# as top-level modules (`import tenure_pb2`); they are rewritten to relative imports so
# that they work inside the `tenure._proto` package.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
proto="$(cd "$here/../../proto" && pwd)"
out="${1:-$here/src/tenure/_proto}"
python="${PYTHON:-python3}"
mkdir -p "$out"
(cd "$proto" && "$python" -m grpc_tools.protoc -I . \
    --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" \
    tenure.proto elections.proto cluster.proto snapshots.proto)
for f in "$out"/*_pb2.py "$out"/*_pb2_grpc.py "$out"/*_pb2.pyi; do
    sed -i -E 's/^import ([a-z_]+_pb2) as /from . import \1 as /' "$f"
done
if [ ! -f "$out/__init__.py" ]; then
    printf '"""Generated gRPC stubs of the Tenure API (package tenure.v1). Do not edit: run generate.sh."""\n' > "$out/__init__.py"
fi
