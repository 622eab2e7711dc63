"""
The CRI api.proto from Debian trixie's golang-github-kubernetes-cri-api-dev, compiled to Python
stubs with grpcio-tools, cached under .cache/cri.

The package is fetched with `apt-get download` under a temporary apt configuration that adds
trixie (the machine's own sources are never touched). Its proto imports gogo protobuf
annotations only for Go code generation; those imports and options are stripped before compiling.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "cri"
PACKAGE = "golang-github-kubernetes-cri-api-dev"
PROTO_IN_DEB = "k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
TRIXIE_SOURCE = (
    "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n"
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
)


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed: {result.stderr[-2000:]}")
    return result


def download_deb() -> Path:
    debs = sorted((CACHE / "debs").glob(f"{PACKAGE}_*.deb"))
    if debs:
        return debs[-1]
    (CACHE / "debs").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for sub in ("lists/partial", "cache/archives/partial", "sources.list.d"):
            (root / sub).mkdir(parents=True)
        (root / "sources.list.d" / "trixie.sources").write_text(TRIXIE_SOURCE)
        options = [
            f"-o=Dir::State::Lists={root / 'lists'}",
            f"-o=Dir::Cache={root / 'cache'}",
            f"-o=Dir::Etc::SourceList={root / 'none.list'}",
            f"-o=Dir::Etc::SourceParts={root / 'sources.list.d'}",
            "-o=Dir::State::status=/dev/null",
            "-o=APT::Get::List-Cleanup=false",
        ]
        (root / "none.list").write_text("")
        _run(["apt-get", *options, "update"])
        _run(["apt-get", *options, "download", PACKAGE], cwd=CACHE / "debs")
    return sorted((CACHE / "debs").glob(f"{PACKAGE}_*.deb"))[-1]


def strip_gogo(text: str) -> str:
    """Drop gogo's import, its file options and its field options ([(gogoproto.x) = y, ...])."""
    text = re.sub(r'^import\s+"github\.com/gogo/protobuf/gogoproto/gogo\.proto";\s*$', "", text, flags=re.M)
    text = re.sub(r"^option\s+\(gogoproto\.[^)]+\)\s*=\s*[^;]+;\s*$", "", text, flags=re.M)
    text = re.sub(r"\s*\[\s*\(gogoproto\.[^\]]*\]", "", text)
    return text


def stubs():
    """(api_pb2, api_pb2_grpc) modules, generated once."""
    out = CACHE / "stubs"
    if not (out / "api_pb2_grpc.py").exists():
        deb = download_deb()
        with tempfile.TemporaryDirectory() as tmp:
            _run(["dpkg-deb", "-x", str(deb), tmp])
            found = list(Path(tmp).rglob(PROTO_IN_DEB))
            if not found:
                raise RuntimeError(f"{PROTO_IN_DEB} not in {deb.name}")
            out.mkdir(parents=True, exist_ok=True)
            proto = out / "api.proto"
            proto.write_text(strip_gogo(found[0].read_text()))
        _run([sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
              f"--grpc_python_out={out}", str(out / "api.proto")])
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")
