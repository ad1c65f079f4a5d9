#!/usr/bin/env bash
# Issue 17: no shipped binary may link a CUDA library (cudart, cuBLAS/cuBLASLt, NCCL, cuDNN,
# the driver): the cuda backend is the loadable module libsacfleet-cuda.so. Reads each
# file's ELF NEEDED entries (readelf -d) and fails naming the binary and the library.
# Negative control first: an executable made here with a NEEDED libcudart.so.13 (a stub
# library given that soname) must be caught, and so must the CUDA module itself where
# one was built (it does link cudart) — so a check that never matches cannot pass.
# usage: no_cuda_link.sh [--module MODULE_SO] BINARY...
set -uo pipefail
command -v readelf >/dev/null || { echo "SKIP: readelf (binutils) not installed"; exit 77; }
module=
if [ "${1:-}" = --module ]; then module=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: $0 [--module SO] BINARY..."; exit 2; }
pattern='lib(cuda|cudart|cublas|cublasLt|nccl|cudnn|nvidia-ml|nvrtc|cufft|curand|cusparse|cusolver)[.-]'

cuda_needed() { readelf -d "$1" 2>/dev/null | awk '/\(NEEDED\)/ {gsub(/[\[\]]/, "", $5); print $5}' | grep -E "$pattern"; }

# negative control: a stub with the soname of the CUDA runtime, and a program that needs it
tmp=$(mktemp -d /tmp/sac-nocuda.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-cc}
echo 'int sac_stub_cudart(void) { return 0; }' > "$tmp/stub.c"
echo 'int sac_stub_cudart(void); int main(void) { return sac_stub_cudart(); }' > "$tmp/main.c"
if "$cc" -shared -fPIC -o "$tmp/libcudart.so.13" "$tmp/stub.c" -Wl,-soname,libcudart.so.13 &&
   "$cc" -o "$tmp/linked" "$tmp/main.c" "$tmp/libcudart.so.13" -Wl,--no-as-needed; then
  cuda_needed "$tmp/linked" >/dev/null || { echo "FAIL: negative control: a binary needing libcudart.so.13 was not caught"; exit 1; }
  echo "negative control: a binary needing libcudart.so.13 is caught"
else
  echo "FAIL: cannot build the negative control with $cc"; exit 1
fi
if [ -n "$module" ]; then
  [ -f "$module" ] || { echo "FAIL: no module at $module"; exit 1; }
  libs=$(cuda_needed "$module" | tr '\n' ' ')
  [ -n "$libs" ] || { echo "FAIL: negative control: the CUDA module $module shows no CUDA library"; exit 1; }
  echo "negative control: the CUDA module needs $libs(as it should)"
fi

bad=0
for b in "$@"; do
  [ -f "$b" ] || { echo "FAIL: no such binary $b"; bad=1; continue; }
  readelf -d "$b" >/dev/null 2>&1 || { echo "FAIL: $b is not an ELF file"; bad=1; continue; }
  libs=$(cuda_needed "$b" | tr '\n' ' ')
  if [ -n "$libs" ]; then
    echo "FAIL: $(basename "$b") links CUDA: $libs"
    bad=1
  else
    echo "ok: $(basename "$b") needs $(readelf -d "$b" | awk '/\(NEEDED\)/ {gsub(/[\[\]]/, "", $5); printf "%s ", $5}')"
  fi
done
[ "$bad" = 0 ] && echo "PASS: $# binaries, none links a CUDA library"
exit "$bad"
