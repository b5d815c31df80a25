#!/bin/bash
# Device call 1 (issue #43): build Slurm 24.11 and nccl-tests, bring the local cluster up with
# --gpus on 4 nodes, then scripts/gpu-box hang (RAS addresses from the plugin; the moved port).
set -u
B=$PWD/.gpubed
T0=$(date +%s)
t() { echo "=== +$(($(date +%s) - T0))s $*"; }
nvidia-smi -L; nproc; uname -r
PY=/opt/torch/.venv/bin/python3
NCCL=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')
ln -sf libnccl.so.2 $NCCL/lib/libnccl.so
t builds
(scripts/build-slurm --jobs 12 $B/slurm-wlm_24.11.5.orig.tar.gz /opt/slurm >/tmp/build-slurm.txt 2>&1; echo "rc $?" >>/tmp/build-slurm.txt) &
bs=$!
tar xf $B/nccl-tests.tar -C /opt
(make -C /opt/nccl-tests -j4 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME=$NCCL \
	NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >/tmp/build-nccl-tests.txt 2>&1; echo "rc $?" >>/tmp/build-nccl-tests.txt) &
bn=$!
wait $bn; t nccl-tests; tail -2 /tmp/build-nccl-tests.txt
wait $bs; t slurm; tail -4 /tmp/build-slurm.txt
find /opt/slurm -type f \( -name '*.so*' -o -path '*/bin/*' -o -path '*/sbin/*' \) -exec strip --strip-unneeded {} + 2>/dev/null
(tar cJf $OUT/slurm-prefix.tar.xz -C / opt/slurm; tar cJf $OUT/nccl-tests-built.tar.xz -C / opt/nccl-tests/build) &
bt=$!
t up
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -15
t gpu-box hang
left=$((560 - ($(date +%s) - T0)))
timeout -k 5 $left scripts/gpu-box --out /tmp/gbo --gpudirect $B/gpudirect hang
echo "gpu-box exit $?"
t pack
wait $bt
cp /tmp/build-*.txt /tmp/gbo/ 2>/dev/null
tar czf $OUT/gpu-box-out.tgz -C /tmp gbo
ls -la $OUT
t done
