#!/bin/bash
# Device call 2 (issue #45): the Slurm prefix, nccl-tests and the Inspector that call 1 built
# and sent back (carried in .gpubed/built/built.txz.*), the 4-node GPU cluster brought up
# again, and the two-fault --per-rail validate repeated as many times as fit (REPEATS, default 3).
set -u
T0=$(date +%s)
t() { echo "=== +$(($(date +%s) - T0))s $*"; }
B=$PWD/.gpubed
PY=/opt/torch/.venv/bin/python3
NCCL=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib
ln -sf libnccl.so.2 $NCCL/libnccl.so
cat $B/built/built.txz.* | xz -d | tar xf - -C /
t unpacked
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -n 4
t up
ompi_info --version 2>&1 | head -1
left=$((590 - ($(date +%s) - T0)))
timeout -k 5 $left scripts/gpu-box --out /tmp/gbo --gpudirect $B/gpudirect --repeats "${REPEATS:-3}" per-rail-down
echo "gpu-box exit $?"
tar czf $OUT/gpu-box-out.tgz -C /tmp gbo
t done
