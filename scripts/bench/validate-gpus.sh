#!/usr/bin/env bash
# scripts/bench/validate-gpus.sh: `gpudirect validate --gpus` on a GPU machine, once clean
# and once with one GPU slowed by a competing load (scripts/bench/gpu-load.cu), for
# docs/results/. Run by hand; it neither fetches nor builds nccl-tests.
#
#   scripts/bench/validate-gpus.sh NCCL_TESTS_BUILD_DIR OUT_DIR GPUS SLOW_GPU FLOOR_GBPS
#   e.g. scripts/bench/validate-gpus.sh ~/nccl-tests/build /tmp/v 0-7 5 300
#
# Writes OUT_DIR/topo.txt (nvidia-smi topo -m), clean.txt and slowed.txt (validate's
# summary and per-pair lines, then its exit status), load.txt (the load's own report), and
# the history validate.sqlite. NCCL_NVLS_ENABLE=0 as everywhere on these machines.
set -euo pipefail
[[ $# -eq 5 ]] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
build=$1 out=$2 gpus=$3 slow=$4 floor=$5
REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
gpudirect=${GPUDIRECT:-$REPO/target/release/gpudirect}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 GPUDIRECT_DB=$out/validate.sqlite

work=$(mktemp -d)
load=""
cleanup() {
	[[ -n $load ]] && kill "$load" 2>/dev/null
	rm -rf -- "$work"
}
trap cleanup EXIT
load_bin=$work/gpu-load
nvcc -O2 -o "$load_bin" "$REPO/scripts/bench/gpu-load.cu"
nvidia-smi topo -m >"$out/topo.txt" 2>&1 || true

validate() { # NAME: runs validate, appends its exit status to OUT_DIR/NAME.txt
	local rc=0
	"$gpudirect" validate --gpus "$gpus" --floor "$floor" -b 8 -e 8G \
		--nccl-tests-dir "$build" >"$out/$1.txt" 2>&1 || rc=$?
	echo "exit status $rc" >>"$out/$1.txt"
}

validate clean
CUDA_VISIBLE_DEVICES=$slow "$load_bin" 600 >"$out/load.txt" 2>&1 &
load=$!
sleep 5 # the load allocates and starts copying
if ! kill -0 "$load" 2>/dev/null; then
	echo "validate-gpus: the load on GPU $slow did not start: $(cat "$out/load.txt")" >&2
	exit 1
fi
validate slowed
kill -TERM "$load" 2>/dev/null || true
wait "$load" || true
load=""
