#!/bin/bash
# Device call (issue #41): the connection profiler (watch-profiler/, a release build carried
# as .gpubed/libgpudirect_watch_profiler.so) with the Inspector chained behind it, in the
# torch training loop on the 4-node GPU cluster: node3's eth1 slowed mid-run (one way, then
# both ways), rank 2 late, and the cost off against on. The Slurm prefix, nccl-tests and the
# Inspector are the ones an earlier call built (.gpubed/built/built.txz.*).
set -u
T0=$(date +%s)
t() { echo "=== +$(($(date +%s) - T0))s $*"; }
B=$PWD/.gpubed
PY=/opt/torch/.venv/bin/python3
NCCL=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib
ln -sf libnccl.so.2 $NCCL/libnccl.so
cat $B/built/built.txz.* | xz -d | tar xf - -C /
install -D -m 0755 $B/libgpudirect_watch_profiler.so /opt/gpudirect-watch/lib/libgpudirect_watch_profiler.so
t unpacked
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -n 2
t up
left=$((585 - ($(date +%s) - T0)))
timeout -k 5 $left scripts/gpu-box --out /tmp/gbo --gpudirect $B/gpudirect --cost-pairs "${PAIRS:-2}" watch-links
echo "gpu-box exit $?"
# The job outputs, the .links files and the Inspector's dumps (big dumps cut to their last 2 MB).
find /tmp/gbo -name '*.log' -size +2M -exec sh -c 'tail -c 2000000 "$1" >"$1.tail" && mv "$1.tail" "$1"' _ {} \;
tar czf $OUT/gpu-box-out.tgz -C /tmp gbo
ls -la $OUT
t done
