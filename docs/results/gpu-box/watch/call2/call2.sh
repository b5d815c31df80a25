#!/bin/bash
# Device call 2 (issue #41): on the machine of call 1 if still warm (Slurm and the cluster
# there), else from the tars call 1 brought back (.gpubed/slurm-prefix.tar.xz, built.tar.xz),
# else building again; then scripts/gpu-box STEPS ("$@"). Waits on its own pids only.
set -u
B=$PWD/.gpubed
T0=$(date +%s)
t() { echo "=== +$(($(date +%s) - T0))s $*"; }
cp $B/gpu-box scripts/gpu-box
nvidia-smi -L
PY=/opt/torch/.venv/bin/python3
NCCL=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')
ln -sf libnccl.so.2 $NCCL/lib/libnccl.so
if [[ -x /opt/slurm/sbin/slurmctld && -f /opt/nccl-inspector/lib/libnccl-profiler-inspector.so ]]; then
	t "warm machine: Slurm, the Inspector and nccl-tests are there"
elif [[ -f $B/slurm-prefix.tar.xz && -f $B/built.tar.xz ]]; then
	t "unpacking call 1's builds"
	tar xJf $B/slurm-prefix.tar.xz -C / && tar xJf $B/built.tar.xz -C /
else
	t "building again"
	mkdir -p /tmp/src && tar xf $B/ncclhead.tar -C /tmp/src && tar xf $B/nccl-tests.tar -C /opt
	(scripts/build-inspector --jobs 2 /tmp/src/ncclhead /opt/nccl-inspector >/tmp/build-inspector.txt 2>&1) &
	bi=$!
	(make -C /opt/nccl-tests -j3 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME=$NCCL \
		NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >/tmp/build-nccl-tests.txt 2>&1) &
	bn=$!
	scripts/build-slurm --jobs 12 $B/slurm-wlm_24.11.5.orig.tar.gz /opt/slurm >/tmp/build-slurm.txt 2>&1
	wait $bi; wait $bn
fi
t up
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -6
t "gpu-box $*"
left=$((580 - ($(date +%s) - T0)))
timeout -k 5 $left scripts/gpu-box --out /tmp/gbo2 --gpudirect $B/gpudirect "$@"
echo "gpu-box exit $?"
t pack
tar czf $OUT/gpu-box-out2.tgz -C /tmp gbo2
ls -la $OUT
t done
