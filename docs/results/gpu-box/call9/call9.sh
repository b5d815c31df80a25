#!/bin/bash
# Call 9 (issue #31): profiles generate on the lent host's real /sys and /proc, checked on the
# node, and compared with the topology NCCL itself dumps from a 1-GPU all_reduce.
export NCCL_NVLS_ENABLE=0
B=$PWD/.gpubed
G=$B/gpudirect
tar xJf $B/nccl-tests-build.tar.xz -C /opt || exit 1
NCCL_LIB=$(/opt/torch/.venv/bin/python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))')
echo "NCCL_LIB=$NCCL_LIB"
{ ls -l /sys/class/net; ls -l /sys/class/infiniband 2>&1; cat /proc/net/route; ls /proc/driver/nvidia/gpus; } > $OUT/host-facts.txt 2>&1
nvidia-smi topo -m > $OUT/nvidia-smi-topo-m.txt 2>&1
for d in /sys/bus/pci/devices/*; do echo "$d -> $(readlink $d) class $(cat $d/class) vendor $(cat $d/vendor) numa $(cat $d/numa_node 2>/dev/null) $(ls -d $d/virtio*/net/* $d/net/* 2>/dev/null | tr '\n' ' ')"; done > $OUT/pci.txt
cat /sys/class/net/eth0/speed > $OUT/eth0-speed.txt 2>&1; cat /sys/devices/system/node/node*/cpulist > $OUT/cpulists.txt 2>&1
lspci -tv > $OUT/lspci-tv.txt 2>&1 || echo "no lspci" > $OUT/lspci-tv.txt
NCCL_TOPO_DUMP_FILE=$OUT/nccl-topo.xml NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,NET LD_LIBRARY_PATH=$NCCL_LIB \
	timeout 120 /opt/nccl-tests/build/all_reduce_perf -b 8 -e 1M -f 4 -g 1 > $OUT/all_reduce-dump.txt 2>&1
echo "all_reduce rc=$?"
ls -l $OUT/nccl-topo.xml
install -d -m 0755 /root/gd && cd /root/gd || exit 1
$G profiles generate --node gpubox --name gpubox --compare-nccl $OUT/nccl-topo.xml -o /root/gd/gpudirect.toml 2> $OUT/generate.err
echo "generate rc=$?"
cp /root/gd/gpudirect.toml $OUT/generated.toml
cat $OUT/generate.err
cat $OUT/generated.toml
$G profiles --config /root/gd/gpudirect.toml check --on-node --node gpubox > $OUT/check-on-node.txt 2>&1
echo "check --on-node rc=$?"
cat $OUT/check-on-node.txt
$G profiles --config /root/gd/gpudirect.toml explain --profile gpubox --node gpubox --local-rank 0 > $OUT/explain.txt 2>&1
echo "explain rc=$?"; cat $OUT/explain.txt
