"""A PEP 517 build backend for the difftx package, with no requirements of
its own (pip needs nothing from a package index to build it).

The wheel holds python/difftx/*.py and the shared library of this checkout,
build/libdifftx.so.1 (built with `make lib` when missing or older than the
sources: make decides), so the installed package runs the very library it was
built with. The library is compiled for this machine's CPU (-march=native):
build the wheel where it will run."""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile

NAME, VERSION = "difftx", "1.0.0"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SO = "libdifftx.so.1"
TAG = "py3-none-linux_x86_64"
DIST = "%s-%s" % (NAME, VERSION)


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: The Differential Transformer in C (libdifftx) from Python, with numpy arrays\n"
            "Requires-Python: >=3.9\nRequires-Dist: numpy\n" % (NAME, VERSION))


def _library():
    so = os.environ.get("DIFFTX_LIB") or os.path.join(ROOT, "build", SO)
    if not os.environ.get("DIFFTX_LIB"):
        r = subprocess.run(["make", "-C", ROOT, "--no-print-directory", "lib"], stdout=sys.stderr, stderr=sys.stderr)
        if r.returncode != 0:
            raise RuntimeError("difftx: `make lib` in %s failed (scripts/setup.sh installs what it needs)" % ROOT)
    if not os.path.exists(so):
        raise RuntimeError("difftx: %s is missing after `make lib`" % so)
    return os.path.realpath(so)


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _write_wheel(wheel_directory, files):
    path = os.path.join(wheel_directory, "%s-%s.whl" % (DIST, TAG))
    info = DIST + ".dist-info"
    files = list(files) + [
        (info + "/METADATA", _metadata().encode()),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: difftx build_backend\nRoot-Is-Purelib: false\n"
                           "Tag: %s\n" % TAG).encode()),
    ]
    record = [_record_line(n, d) for n, d in files] + [info + "/RECORD,,"]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            zi = zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if n.endswith(SO) else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
        z.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return os.path.basename(path)


def _package_files():
    pkg = os.path.join(HERE, NAME)
    for n in sorted(os.listdir(pkg)):
        if n.endswith(".py"):
            with open(os.path.join(pkg, n), "rb") as f:
                yield "%s/%s" % (NAME, n), f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open(_library(), "rb") as f:
        so = f.read()
    return _write_wheel(wheel_directory, list(_package_files()) + [("%s/%s" % (NAME, SO), so)])


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, DIST + ".dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(_metadata())
    return DIST + ".dist-info"
