#!/bin/bash
# Call 3: never a bare `wait` (it waits for the tee of a process substitution: calls 1-2 hung so).
set -u
D=/tmp/dumps; mkdir -p $D
trap 'cp /tmp/*-r*.txt $D/ 2>/dev/null; tar czf $OUT/dumps3.tgz -C /tmp dumps' EXIT
exec > >(tee $OUT/watch3.log) 2>&1
PY=/opt/torch/.venv/bin/python3; CUDA_HOME=/usr/local/cuda
mkdir -p /tmp/src && tar xf .gpubed/ncclsrc.tar -C /tmp/src && tar xf .gpubed/ncclhead.tar -C /tmp/src
( cd /tmp/src/ncclhead/plugins/profiler/inspector && make -j16 CUDA_HOME=$CUDA_HOME >/tmp/b2.txt 2>&1 ) &
b2=$!
( cd /tmp/src/ncclsrc/ext-profiler/inspector && make -j8 CUDA_HOME=$CUDA_HOME >/tmp/b1.txt 2>&1 ) &
b1=$!
( cd /tmp/src/ncclsrc/ext-profiler/example && make -j8 CUDA_HOME=$CUDA_HOME >/tmp/b3.txt 2>&1 ) &
b3=$!
wait $b1 $b2 $b3
OLD=/tmp/src/ncclsrc/ext-profiler/inspector/libnccl-profiler-inspector.so
NEW=/tmp/src/ncclhead/plugins/profiler/inspector/libnccl-profiler-inspector.so
EX=/tmp/src/ncclsrc/ext-profiler/example/libnccl-profiler-example.so
cp .gpubed/job.py /tmp/job.py
run2() { tag=$1; lim=$2; shift 2; port=$((29500 + RANDOM % 1000)); pids=""
  for r in 0 1; do
    env RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TAG=$tag NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 PYTHONFAULTHANDLER=1 "$@" \
      timeout -k 3 $lim unshare --uts sh -c "hostname node$((r+1)); exec $PY /tmp/job.py" > /tmp/$tag-r$r.txt 2>&1 &
    pids="$pids $!"
  done
  wait $pids; echo "-- $tag"; grep -h RESULT /tmp/$tag-r*.txt; grep -h "rror\|Segm\|Fatal" /tmp/$tag-r*.txt | head -6; }
ins() { echo NCCL_PROFILER_PLUGIN=$1 NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 NCCL_INSPECTOR_DUMP_DIR=$D/$2; mkdir -p $D/$2; }
run2 late 40 STEPS=40 LATE_RANK=1 $(ins $NEW late) NCCL_INSPECTOR_DUMP_VERBOSE=1
run2 clean 40 STEPS=40 $(ins $NEW clean) NCCL_INSPECTOR_DUMP_VERBOSE=1
for i in 1 2; do run2 off$i 30 STEPS=100; run2 on$i 30 STEPS=100 $(ins $NEW cost$i); done
run2 old 30 STEPS=10 $(ins $OLD old) NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,PROFILE
tail -4 /tmp/old-r0.txt
mkdir -p $D/proxy; run2 proxy 30 STEPS=2 NCCL_PROFILER_PLUGIN=$EX NCCL_PROFILE_EVENT_MASK=26 NCCL_PROFILE_DUMP_FILE=$D/proxy/trace
find $D -type f -printf '%s %p\n' | head -30
