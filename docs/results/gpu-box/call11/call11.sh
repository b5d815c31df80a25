#!/bin/bash
# Device call 11: Slurm 24.11.5 from Debian's tarball, the 4-node GPU cluster, and
# scripts/gpu-box wiring (validate --test wiring clean, node2's eth1/eth2 swapped, restored).
set -uo pipefail
cd "$(dirname "$0")/.."
G=$PWD/.gpubed
P=/opt/gd-slurm
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
if [ ! -x $P/sbin/slurmctld ]; then
	t0=$(date +%s)
	scripts/build-slurm --jobs 16 "$G/src/slurm-wlm_24.11.5.orig.tar.gz" $P >"$OUT/build-slurm.log" 2>&1 || { tail -30 "$OUT/build-slurm.log"; exit 1; }
	echo "build-slurm: $(($(date +%s) - t0)) s"
fi
NCCL=$(/opt/torch/.venv/bin/python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0] + "/lib")')
echo "nccl lib: $NCCL"
chmod 0755 "$G" "$G/gpudirect" "$G/libspank_gpudirect.so"
scripts/local-cluster down >/dev/null 2>&1 || true
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix $P --tools "$G/tools" --plugin "$G/libspank_gpudirect.so" --nccl-lib "$NCCL" >"$OUT/up.log" 2>&1 || { tail -40 "$OUT/up.log"; tail -20 /var/lib/gpudirect-local-cluster/log/slurmctld.log; exit 1; }
tail -12 "$OUT/up.log"
scripts/gpu-box --out "$OUT/box" --gpudirect "$G/gpudirect" wiring 2>&1 | tail -60
cp /proc/driver/nvidia/gpus/*/information "$OUT/driver-gpu-information.txt" 2>/dev/null
chmod -R a+rX "$OUT"
