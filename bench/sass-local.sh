#!/usr/bin/env bash
# Disassemble sm_90 cubins here, without a GPU: CUDA 13 ships no cuobjdump / nvdisasm on this machine, but
# Debian's nvidia-cuda-toolkit (11.8, non-free) has an nvdisasm that reads sm_90 code once the cubin's ELF
# header takes the pre-12.8 layout (e_flags 0x005a055a: SM 90, virtual SM 90; EI_ABIVERSION 7). The package
# is fetched once (apt-get download, ~84 MB) and unpacked under ~/.cache/fuseformer/cuda-tk-11.8.
#
#   bash bench/sass-local.sh FILE.cubin ...     one FILE.sass beside each, and a line each: instructions, the
#                                                grid-dependency wait's line (ACQBULK) and the loads ahead of it
#   (node dist/bench/sass-probe.js writes the batch-1 GEMVs' cubins into sass-probe/)
set -euo pipefail
tk=${FUSEFORMER_CUDA_TK_11:-$HOME/.cache/fuseformer/cuda-tk-11.8}
nvdisasm=$tk/usr/bin/nvdisasm
if [ ! -x "$nvdisasm" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if ! (cd "$work" && apt-get download nvidia-cuda-toolkit >/dev/null 2>&1); then
    echo "sass-local: could not download nvidia-cuda-toolkit: enable Debian's non-free component (Components: main contrib non-free in /etc/apt/sources.list.d/debian.sources), then apt-get update" >&2
    exit 1
  fi
  mkdir -p "$tk"
  dpkg -x "$work"/nvidia-cuda-toolkit_*.deb "$tk"
fi
[ $# -gt 0 ] || { echo "usage: bash bench/sass-local.sh FILE.cubin ..." >&2; exit 2; }
for cubin in "$@"; do
  [ -f "$cubin" ] || { echo "sass-local: no such file: $cubin" >&2; exit 1; }
  patched=$(mktemp)
  python3 - "$cubin" "$patched" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], 'rb').read())
if data[:4] != b'\x7fELF' or data[4] != 2:
    sys.exit(f'sass-local: {sys.argv[1]} is not a 64-bit ELF cubin')
struct.pack_into('<I', data, 0x30, 0x005a055a)  # e_flags: SM 90, virtual SM 90 (the pre-12.8 layout)
data[8] = 7                                      # EI_ABIVERSION
open(sys.argv[2], 'wb').write(data)
PY
  sass=${cubin%.cubin}.sass
  "$nvdisasm" -c "$patched" > "$sass"
  rm -f "$patched"
  wait_line=$(grep -nE 'ACQBULK' "$sass" | head -1 | cut -d: -f1 || true)
  echo "$(basename "$cubin" .cubin): $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$sass") instructions; wait (ACQBULK) at line ${wait_line:-none}; loads ahead of it: $(awk -v w="${wait_line:-0}" 'NR < w && /LDG[^S]/' "$sass" | wc -l) (weights, .NA: $(awk -v w="${wait_line:-0}" 'NR < w && /LDG\.E\.NA/' "$sass" | wc -l))"
done
