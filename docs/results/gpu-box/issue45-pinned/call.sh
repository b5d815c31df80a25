#!/bin/bash
# Device call 3 (issue #45): build Slurm 24.11.5 and nccl-tests (MPI=1), send both back in
# pieces for the next call, bring up the 4-node GPU cluster and run the two-fault --per-rail
# validate (node2 eth3 at 300 mbit, node3 eth2 down) with the launch pinned to eth0, as many
# times as fit.
set -u
T0=$(date +%s)
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
# The Inspector too (for the watch runs of later calls; about 10 s).
mkdir -p /tmp/nccl-src && tar xf $B/nccl-src.tar -C /tmp/nccl-src
scripts/build-inspector --jobs 4 /tmp/nccl-src/nccl /opt/nccl-inspector 2>&1 | tail -n 3
wait $bs; t slurm; tail -n 2 /tmp/build-slurm.txt
# The built parts back, in pieces under 16 MiB, for the next call to carry.
(tar cf - -C / opt/slurm opt/nccl-tests/build opt/nccl-inspector | xz -T8 -6 | split -b 15M - $OUT/built.txz.) &
pk=$!
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -n 4
t up
wait $pk; ls -la $OUT; t packed
ompi_info --version 2>&1 | head -1
left=$((590 - ($(date +%s) - T0)))
timeout -k 5 $left scripts/gpu-box --out /tmp/gbo --gpudirect $B/gpudirect --repeats 3 per-rail-down
echo "gpu-box exit $?"
tar czf $OUT/gpu-box-out.tgz -C /tmp gbo
t done
