#!/bin/bash
# Device call A (issues #41 and #45): build Slurm 24.11.5, nccl-tests (MPI=1) and the
# Inspector, send them back in pieces for later calls (built.txz.*), bring up the 4-node GPU
# cluster, run the connection profiler's step (scripts/gpu-box watch-links: node3's eth1
# slowed mid-run one way then both ways, rank 2 late, the cost off/on), then as many of
# issue #45's two-fault --per-rail runs as the call has time for.
set -u
T0=$(date +%s)
# LIMIT: the seconds this call may run (the device's limit_s); the steps fit inside it.
END=$((${LIMIT:-600} - 15))
t() { echo "=== +$(($(date +%s) - T0))s $*"; }
B=$PWD/.gpubed
PY=/opt/torch/.venv/bin/python3
NCCL=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib
ln -sf libnccl.so.2 $NCCL/libnccl.so
(scripts/build-slurm --jobs 14 $B/slurm-wlm_24.11.5.orig.tar.gz /opt/slurm >/tmp/build-slurm.txt 2>&1; echo "rc $?" >>/tmp/build-slurm.txt) &
bs=$!
tar xf $B/nccl-tests.tar -C /opt
make -C /opt/nccl-tests -j4 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME=${NCCL%/lib} \
	NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >/tmp/build-nccl-tests.txt 2>&1; echo "nccl-tests rc $?"
mkdir -p /tmp/nccl-src && tar xf $B/nccl-src.tar -C /tmp/nccl-src
scripts/build-inspector --jobs 4 /tmp/nccl-src/nccl /opt/nccl-inspector 2>&1 | tail -n 3
install -D -m 0755 $B/libgpudirect_watch_profiler.so /opt/gpudirect-watch/lib/libgpudirect_watch_profiler.so
wait $bs; t slurm; tail -n 2 /tmp/build-slurm.txt
(tar cf - -C / opt/slurm opt/nccl-tests/build opt/nccl-inspector | xz -T8 -6 | split -b 15M - $OUT/built.txz.) &
pk=$!
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -n 2
t up
wait $pk; t packed
timeout -k 5 $((END - 25 - ($(date +%s) - T0))) scripts/gpu-box --out /tmp/gbo --gpudirect $B/gpudirect --cost-pairs "${PAIRS:-1}" watch-links
echo "gpu-box watch-links exit $?"
t watch-links
left=$((END - 5 - ($(date +%s) - T0)))
if ((left > 160)); then
	timeout -k 5 $left scripts/gpu-box --out /tmp/gbo --gpudirect $B/gpudirect --repeats 1 per-rail-down
	echo "gpu-box per-rail-down exit $?"
fi
find /tmp/gbo -name '*.log' -size +2M -exec sh -c 'tail -c 2000000 "$1" >"$1.tail" && mv "$1.tail" "$1"' _ {} \;
tar czf $OUT/gpu-box-out.tgz -C /tmp gbo
ls -la $OUT
t done
