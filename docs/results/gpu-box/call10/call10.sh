#!/bin/bash
# Call 10 (issue #31): the NCCL topology file `profiles generate --topo-xml` writes on the lent
# host, loaded by NCCL (NCCL_TOPO_FILE) in a 1-GPU all_reduce; NCCL's dump of what it then saw.
export NCCL_NVLS_ENABLE=0
B=$PWD/.gpubed
G=$B/gpudirect
tar xJf $B/nccl-tests-build.tar.xz -C /opt || exit 1
NCCL_LIB=$(/opt/torch/.venv/bin/python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))')
$G profiles generate --node gpubox --name gpubox --topo-xml $OUT/generated-topo.xml -o $OUT/generated.toml 2> $OUT/generate.err
echo "generate rc=$?"; cat $OUT/generate.err; cat $OUT/generated-topo.xml
NCCL_TOPO_FILE=$OUT/generated-topo.xml NCCL_TOPO_DUMP_FILE=$OUT/nccl-topo-after.xml NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV \
	LD_LIBRARY_PATH=$NCCL_LIB timeout 120 /opt/nccl-tests/build/all_reduce_perf -b 8 -e 1M -f 4 -g 1 > $OUT/all_reduce-topo-file.txt 2>&1
echo "all_reduce with NCCL_TOPO_FILE rc=$?"
grep -i "topo\|xml" $OUT/all_reduce-topo-file.txt | head -20
grep "Avg bus\|Out of bounds" $OUT/all_reduce-topo-file.txt
cat $OUT/nccl-topo-after.xml
