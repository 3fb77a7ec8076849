#!/usr/bin/env bash
# Build .device_sonic/: SonicMoE's own environment for the GPU machine (Python 3.12, torch, triton,
# CUDA 13, no CuTe DSL, no network), carried INSTEAD of .device (together they pass 64 MiB).
#
# SonicMoE (PyPI sonic-moe 0.1.2.post1) pins nvidia-cutlass-dsl==4.4.2 and quack-kernels>=0.3.11;
# its forward does not compile with this project's DSL 4.8.1 and quack 0.6.5. Of quack's releases
# only 0.3.11 (the default here), 0.4.0 and 0.4.1 accept DSL 4.4.2. DSL 4.4.2 ships as a 10 KB meta
# wheel plus -libs-base (cu12) and -libs-cu13, the latter a superset of the former: the meta and cu13
# wheels are unpacked and recompressed with xz (first run ~4 CPU minutes, then cached).
#
#   bash scripts/sonic_bundle.sh                    # -> .device_sonic/ (about 48 MiB)
#
# On the GPU machine (run with carry [".device_sonic"]):
#
#   bash .device_sonic/run.sh bash scripts/layer_runs.sh sonic
#   QUACK_VERSION=0.4.1 bash .device_sonic/run.sh ...          # the other quack
#
# sonic-moe declares torch>=2.7.1,<=2.9.1; everything is installed with --no-deps over the GPU
# machine's torch 2.11, a combination SonicMoE does not promise (it imports there; whether it runs
# is what the first GPU call tells). The folder is git-ignored through the repository's
# info/exclude. Versions: DSL_VERSION, QUACK_VERSIONS, SONIC_VERSION.
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/.." && pwd))
OUT="$ROOT/.device_sonic"
DSL_VERSION=${DSL_VERSION:-4.4.2}
QUACK_VERSIONS=${QUACK_VERSIONS:-"0.3.11 0.4.1"}   # first = default used by run.sh
SONIC_VERSION=${SONIC_VERSION:-0.1.2.post1}
EXCLUDE=$(git -C "$ROOT" rev-parse --path-format=absolute --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx '/.device_sonic/' "$EXCLUDE" 2>/dev/null || echo '/.device_sonic/' >> "$EXCLUDE"
mkdir -p "$OUT"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pearl-moe-device"   # survives a fresh work tree
mkdir -p "$CACHE"
ARCHIVE="$CACHE/cutlass_dsl-$DSL_VERSION-cu13-py312.tar.xz"
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -f "$ARCHIVE" ]; then
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$tmp/whl" \
    "nvidia-cutlass-dsl==$DSL_VERSION" "nvidia-cutlass-dsl-libs-cu13==$DSL_VERSION"
  mkdir -p "$tmp/tree"
  for w in "$tmp"/whl/*.whl; do (cd "$tmp/tree" && python3 -m zipfile -e "$w" .); done
  echo "compressing the DSL (several minutes)..." >&2
  (cd "$tmp/tree" && tar cf - . | xz --lzma2=preset=9e,dict=256MiB -T1 > "$ARCHIVE.part")
  mv "$ARCHIVE.part" "$ARCHIVE"
fi
cp "$ARCHIVE" "$OUT/cutlass_dsl.tar.xz"
rm -rf "$OUT/wheels" "$OUT/quack"
mkdir -p "$OUT/wheels" "$OUT/quack"
# Small deps missing on the GPU machine (quack's apache-tvm-ffi and torch-c-dlpack-ext; einops,
# cuda-bindings, numpy, typing-extensions are there) and SonicMoE itself (pure Python, no deps).
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$OUT/wheels" \
  "apache-tvm-ffi>=0.1.6,<0.2" torch-c-dlpack-ext "sonic-moe==$SONIC_VERSION"
for q in $QUACK_VERSIONS; do
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$OUT/quack" "quack-kernels==$q"
done
echo "${QUACK_VERSIONS%% *}" > "$OUT/quack/DEFAULT"
cat > "$OUT/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine: unpack SonicMoE's own environment (CuTe DSL 4.4.2 cu13, quack, sonic-moe) once
# into /tmp/sonic_site (apart from .device's /tmp/site), then run the command with it on PYTHONPATH.
#   bash .device_sonic/run.sh bash scripts/layer_runs.sh sonic     # quack 0.3.11 (the default)
#   QUACK_VERSION=0.4.1 bash .device_sonic/run.sh ...
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd)
S=/tmp/sonic_site
QV=${QUACK_VERSION:-$(cat "$D/quack/DEFAULT")}
if [ ! -f $S/.bundle-ok ]; then
  rm -rf $S; mkdir -p $S
  python3 -c "import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" "$D/cutlass_dsl.tar.xz" $S
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $S "$D"/wheels/*.whl
  touch $S/.bundle-ok
fi
if [ ! -f "$S/quack-$QV/.ok" ]; then
  rm -rf "$S/quack-$QV"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S/quack-$QV" "$D"/quack/quack_kernels-"$QV"-*.whl
  touch "$S/quack-$QV/.ok"
fi
# Drop any /tmp/site (the project's DSL 4.8.1 bundle) from an inherited PYTHONPATH.
P=$(printf '%s' "${PYTHONPATH:-}" | tr ':' '\n' | { grep -v '^/tmp/site\(/\|$\)' || true; } | paste -sd: -)
export PYTHONPATH="$S/quack-$QV:$S:$S/nvidia_cutlass_dsl/python_packages:$PWD${P:+:$P}"
export CUTE_DSL_CACHE_DIR=${CUTE_DSL_CACHE_DIR:-/tmp/sonic_cute_dsl_cache}
export QUACK_CACHE_DIR=${QUACK_CACHE_DIR:-/tmp/sonic_quack_cache}
export PYTHONUNBUFFERED=1
exec "$@"
RUN
chmod +x "$OUT/run.sh"
du -sh "$OUT" >&2; du -sb "$OUT" >&2
echo "ready: carry .device_sonic (instead of .device); on the GPU machine: bash .device_sonic/run.sh <command>" >&2
