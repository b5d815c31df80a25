#!/bin/bash
# Device call B (issue #41): the connection profiler again after the fix of its handles (call A:
# ranks crashed on their first allreduce). Reuses what call A built (carry .gpubed2: built.txz.*
# from call A's $OUT, tools, gpudirect.xz, the plugin for 24.11, the profiler), brings up the
# 4-node GPU cluster and runs `scripts/gpu-box watch-links`.
set -u
T0=$(date +%s)
# LIMIT: the seconds this call may run (the device's limit_s); the steps fit inside it.
END=$((${LIMIT:-600} - 15))
t() { echo "=== +$(($(date +%s) - T0))s $*"; }
B=$PWD/.gpubed2
PY=/opt/torch/.venv/bin/python3
NCCL=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib
ln -sf libnccl.so.2 $NCCL/libnccl.so
cat $B/built.txz.* | xz -d -T8 | tar xf - -C /
install -D -m 0755 $B/libgpudirect_watch_profiler.so /opt/gpudirect-watch/lib/libgpudirect_watch_profiler.so
# The launcher travels compressed (the carry limit is 64 MiB).
xz -dc $B/gpudirect.xz >/opt/gpudirect && chmod 0755 /opt/gpudirect
t unpacked
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -n 2
t up
timeout -k 5 $((END - 10 - ($(date +%s) - T0))) scripts/gpu-box --out /tmp/gbo --gpudirect /opt/gpudirect --cost-pairs "${PAIRS:-1}" watch-links
echo "gpu-box watch-links exit $?"
t watch-links
find /tmp/gbo -name '*.log' -size +2M -exec sh -c 'tail -c 2000000 "$1" >"$1.tail" && mv "$1.tail" "$1"' _ {} \;
tar czf $OUT/gpu-box-out.tgz -C /tmp gbo
ls -la $OUT
t "done"
