#!/bin/bash
# Device call 2 (issue #45): with node3's eth2 down, srun --mpi=pmix steps of all_reduce_perf
# (MPI=1) over node[3-4] inside one allocation, 4 each: no pinning, Open MPI's btl/oob pinned
# to eth0, PMIx's ptl pinned to eth0, both. A step that does not end in 25 s is a hang.
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
wait $bs; t slurm; tail -n 2 /tmp/build-slurm.txt
scripts/local-cluster up --gpus --nodes 4 --slurm-prefix /opt/slurm --tools $B/tools --plugin $B/spank_gpudirect.so 2>&1 | tail -n 4
eval "$(scripts/local-cluster env 2>/dev/null)"
sinfo
t up
scripts/local-cluster nic node3 eth2 down
ompi_info --version 2>&1 | head -1; ls /usr/lib/x86_64-linux-gnu/pmix* -d
mkdir -p /tmp/pin && chmod 777 /tmp/pin
cat >/tmp/pin/inner.sh <<'IN'
#!/bin/bash
# Inside one allocation: 5 steps per setting, each cut at 20 s.
for setting in none btl-oob all; do
  case $setting in
    none) e=() ;;
    btl-oob) e=(OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0) ;;
    ptl) e=(PMIX_MCA_ptl_tcp_if_include=eth0) ;;
    all) e=(OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0 PMIX_MCA_ptl_tcp_if_include=eth0) ;;
  esac
  for i in 1 2 3; do
    s=$(date +%s%N)
    env "${e[@]}" NCCL_SOCKET_IFNAME=eth1 NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$NCCL_LIB timeout -k 3 20 \
      srun -N2 -w node3,node4 --ntasks-per-node=1 --mpi=pmix --gpudirect=none \
      /opt/nccl-tests/build/all_reduce_perf -b 1M -e 1M -g 1 -n 5 -w 1 >/tmp/pin/$setting-$i.txt 2>&1
    rc=$?
    ms=$((($(date +%s%N) - s) / 1000000))
    init=$(grep -c "Avg bus bandwidth" /tmp/pin/$setting-$i.txt)
    echo "$setting run $i: rc $rc, $ms ms, completed $init"
  done
done
IN
chmod 755 /tmp/pin/inner.sh
runuser -u gdtestuser -- env PATH="$PATH" SLURM_CONF="$SLURM_CONF" NCCL_LIB="$NCCL" HOME=/tmp/pin \
  timeout 250 salloc -N2 -w node3,node4 --gres=gpu:1 /tmp/pin/inner.sh 2>&1
scripts/local-cluster nic node3 eth2 restore
t pin done
tar czf $OUT/pin.tgz -C /tmp pin
left=$((585 - ($(date +%s) - T0)))
timeout -k 5 $left scripts/gpu-box --out /tmp/gbo --gpudirect $B/gpudirect --repeats 2 per-rail-down
echo "gpu-box exit $?"
tar czf $OUT/gpu-box-out.tgz -C /tmp gbo
t done
