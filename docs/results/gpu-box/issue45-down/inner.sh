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
