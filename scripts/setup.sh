#!/usr/bin/env bash
# Installs the Debian packages difftx needs, only those that are missing.
#   scripts/setup.sh            build dependencies (gcc, make, cJSON, oneDNN, PCRE2, libmicrohttpd; OpenMPI for
#                               training over several processes or machines: mpirun difftx train)
#   scripts/setup.sh --torch    also python3-torch (only to regenerate fixtures)
#   scripts/setup.sh --plot     also python3-matplotlib (tools/plot_loss.py, make demo)
#   scripts/setup.sh --python   also python3 with numpy, venv and pip (the Python package, python/)
#   scripts/setup.sh --fuzz     also clang with libFuzzer and OpenMP (make fuzz) and llvm's symbolizer
#   scripts/setup.sh --browser  also Debian's chromium (the serving test renders the explorer page in it)
set -euo pipefail
pkgs=(gcc make libc6-dev libcjson-dev libdnnl-dev libpcre2-dev libmicrohttpd-dev openmpi-bin libopenmpi-dev)
for opt in "$@"; do
    case $opt in
        --torch) pkgs+=(python3 python3-torch python3-numpy python3-matplotlib) ;;
        --plot) pkgs+=(python3 python3-matplotlib) ;;
        --python) pkgs+=(python3 python3-numpy python3-venv python3-pip) ;;
        --fuzz) pkgs+=(clang libclang-rt-14-dev libomp-dev llvm) ;; # the sanitizer and libFuzzer runtimes are only recommended by clang
        --browser) pkgs+=(chromium) ;;
        *) echo "setup: unknown option $opt (--torch, --plot, --python, --fuzz, --browser)" >&2; exit 2 ;;
    esac
done
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
