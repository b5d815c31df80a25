#!/bin/bash
# Device calls of 2026-12-06 (issues #45 and #41). Reuses what 2026-12-06's call A built
# (carry .gpubed2: built.txz.* with /opt/slurm 24.11.5 and /opt/nccl-inspector, tools, the
# plugin for 24.11, the connection profiler, gpudirect.xz), builds nccl-tests (MPI=1) from the
# checkout carried as .gpubed/nccl-tests.tar, or unpacks an earlier call's build of it
# (.gpubed2/nccl-tests-build.txz, sent back in $OUT), brings up the 4-node GPU cluster and runs
# scripts/gpu-box with GPU_BOX_ARGS, e.g. "--repeats 3 per-rail-down" (NCCL_TESTS=0: steps
# that need no nccl-tests, none built).
set -u
T0=$(date +%s)
# LIMIT: the seconds this call may run (the device's limit_s); the steps fit inside it.
END=$((${LIMIT:-600} - 20))
t() { echo "=== +$(($(date +%s) - T0))s $*"; }
B=$PWD/.gpubed2
PY=/opt/torch/.venv/bin/python3
NCCL=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib
ln -sf libnccl.so.2 $NCCL/libnccl.so
cat $B/built.txz.* | xz -d -T8 | tar xf - -C /
install -D -m 0755 $B/libgpudirect_watch_profiler.so /opt/gpudirect-watch/lib/libgpudirect_watch_profiler.so
# The launcher travels compressed (the carry limit is 64 MiB).
xz -dc $B/gpudirect.xz >/opt/gpudirect && chmod 0755 /opt/gpudirect
build=
if [[ ${NCCL_TESTS:-1} == 0 ]]; then
	t "unpacked (no nccl-tests)"
elif [[ -f $B/nccl-tests-build.txz ]]; then
	mkdir -p /opt/nccl-tests && xz -dc $B/nccl-tests-build.txz | tar xf - -C /opt/nccl-tests
	t "unpacked (nccl-tests from an earlier call)"
else
	t unpacked
	tar xf .gpubed/nccl-tests.tar -C /opt
	(make -C /opt/nccl-tests -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME=${NCCL%/lib} \
		NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >/tmp/build-nccl-tests.txt 2>&1
	echo "nccl-tests rc $?" >>/tmp/build-nccl-tests.txt) &
	build=$!
fi
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -n 2
t up
if [[ -n $build ]]; then
	wait $build
	tail -n 1 /tmp/build-nccl-tests.txt
	tar cf - -C /opt/nccl-tests build | xz -T8 >$OUT/nccl-tests-build.txz
	t "nccl-tests built"
fi
ompi_info --version 2>&1 | head -n 1
# shellcheck disable=SC2086 # GPU_BOX_ARGS is words
timeout -k 5 $((END - ($(date +%s) - T0))) scripts/gpu-box --out /tmp/gbo --gpudirect /opt/gpudirect $GPU_BOX_ARGS
echo "gpu-box exit $?"
find /tmp/gbo -name '*.log' -size +2M -exec sh -c 'tail -c 2000000 "$1" >"$1.tail" && mv "$1.tail" "$1"' _ {} \;
tar czf $OUT/gpu-box-out.tgz -C /tmp gbo
t "done"
