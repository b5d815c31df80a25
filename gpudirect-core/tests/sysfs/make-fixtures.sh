#!/bin/sh
# Builds the sysfs fixture trees used by gpudirect_core::locality tests and by
# `gpudirect profiles explain --sysfs`. Re-run after editing; commit the result.
#
# Each tree holds only what the locality reader reads, laid out as Linux does:
#   devices/pciDDDD:BB/<bridge>/.../<bdf>/{vendor,class,numa_node,net/<if>/,infiniband/<hca>/}
#   bus/pci/devices/<bdf> -> ../../../devices/pciDDDD:BB/.../<bdf>
#   devices/system/node/nodeN/cpulist
#
# a3-high: endpoints exactly as in DESIGN.md (Google's a3vm GPU-RXQ configurator):
#   GPUs 04,05 -> NIC 06 (eth1); 0a,0b -> 0c (eth2); 84,85 -> 86 (eth3); 8a,8b -> 8c (eth4);
#   eth0 (control) on the root complex. Bridge addresses are illustrative.
# a3-mega: ILLUSTRATIVE. 8 data NICs, one per GPU, named as on GCP's Slurm images
#   (enp6s0 ... enp142s0, control enp0s12); each GPU and its NIC share a second-level switch.
# p5: ILLUSTRATIVE. 8 GPUs, 32 EFA devices (RDMA only, no netdev), 4 under each GPU's switch.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

# dev ROOT CHAIN VENDOR CLASS NUMA: CHAIN is pciDDDD:BB/<bdf>/.../<bdf>
dev() {
    root=$1 chain=$2 vendor=$3 class=$4 numa=$5
    bdf=${chain##*/}
    mkdir -p "$root/devices/$chain" "$root/bus/pci/devices"
    printf '%s\n' "$vendor" > "$root/devices/$chain/vendor"
    printf '%s\n' "$class" > "$root/devices/$chain/class"
    printf '%s\n' "$numa" > "$root/devices/$chain/numa_node"
    ln -sfn "../../../devices/$chain" "$root/bus/pci/devices/$bdf"
}
bridge() { dev "$1" "$2" 0x8086 0x060400 "$3"; }
gpu() { dev "$1" "$2" 0x10de 0x030200 "$3"; }
# nic ROOT CHAIN NUMA NETDEV|- [HCA...]
nic() {
    root=$1 chain=$2 numa=$3 netdev=$4
    shift 4
    dev "$root" "$chain" 0x1ae0 0x020000 "$numa"
    # A file in each name directory, as on Linux (and so that git keeps the directory).
    if [ "$netdev" != - ]; then
        mkdir -p "$root/devices/$chain/net/$netdev"
        printf 'up\n' > "$root/devices/$chain/net/$netdev/operstate"
    fi
    for hca in "$@"; do
        mkdir -p "$root/devices/$chain/infiniband/$hca/ports/1"
        printf '4: ACTIVE\n' > "$root/devices/$chain/infiniband/$hca/ports/1/state"
    done
}
numa() { mkdir -p "$1/devices/system/node/node$2"; printf '%s\n' "$3" > "$1/devices/system/node/node$2/cpulist"; }

# --- A3 High -------------------------------------------------------------------
r=$here/a3-high
rm -rf "$r"
numa "$r" 0 0-51,104-155
numa "$r" 1 52-103,156-207
nic "$r" pci0000:00/0000:00:0c.0 0 eth0
# switch(root port, upstream, downstream ports) gpu gpu nic netdev numa
a3h_switch() {
    rp=$1 up=$2 dn=$3 g1=$4 g2=$5 n=$6 ifname=$7 node=$8 host=$9
    bridge "$r" "$host/$rp" "$node"
    bridge "$r" "$host/$rp/$up" "$node"
    i=0
    for ep in "$g1" "$g2" "$n"; do
        bridge "$r" "$host/$rp/$up/$dn.$i" "$node"
        i=$((i + 1))
    done
    gpu "$r" "$host/$rp/$up/$dn.0/$g1" "$node"
    gpu "$r" "$host/$rp/$up/$dn.1/$g2" "$node"
    nic "$r" "$host/$rp/$up/$dn.2/$n" "$node" "$ifname"
}
a3h_switch 0000:00:01.0 0000:01:00.0 0000:02:00 0000:04:00.0 0000:05:00.0 0000:06:00.0 eth1 0 pci0000:00
a3h_switch 0000:00:02.0 0000:07:00.0 0000:08:00 0000:0a:00.0 0000:0b:00.0 0000:0c:00.0 eth2 0 pci0000:00
a3h_switch 0000:80:01.0 0000:81:00.0 0000:82:00 0000:84:00.0 0000:85:00.0 0000:86:00.0 eth3 1 pci0000:80
a3h_switch 0000:80:02.0 0000:87:00.0 0000:88:00 0000:8a:00.0 0000:8b:00.0 0000:8c:00.0 eth4 1 pci0000:80
# An NVSwitch: NVIDIA's vendor id, bridge class: not a GPU.
dev "$r" pci0000:00/0000:00:03.0/0000:40:00.0 0x10de 0x068000 0
bridge "$r" pci0000:00/0000:00:03.0 0

# --- A3 Mega (illustrative) ------------------------------------------------------
r=$here/a3-mega
rm -rf "$r"
numa "$r" 0 0-51,104-155
numa "$r" 1 52-103,156-207
nic "$r" pci0000:00/0000:00:0c.0 0 enp0s12
# One PCIe switch per GPU pair, a second-level switch per GPU+NIC pair.
a3m_pair() {
    host=$1 rp=$2 up=$3 dnbus=$4 node=$5
    shift 5
    bridge "$r" "$host/$rp" "$node"
    bridge "$r" "$host/$rp/$up" "$node"
    i=0
    while [ $# -ge 3 ]; do
        g=$1 n=$2 ifname=$3
        shift 3
        dn="$host/$rp/$up/0000:$dnbus:0$i.0"
        bridge "$r" "$dn" "$node"
        gpu "$r" "$dn/$g" "$node"
        nic "$r" "$dn/$n" "$node" "$ifname"
        i=$((i + 1))
    done
}
a3m_pair pci0000:00 0000:00:01.0 0000:01:00.0 02 0 0000:04:00.0 0000:06:00.0 enp6s0 0000:05:00.0 0000:07:00.0 enp7s0
a3m_pair pci0000:00 0000:00:02.0 0000:08:00.0 09 0 0000:0a:00.0 0000:0d:00.0 enp13s0 0000:0b:00.0 0000:0e:00.0 enp14s0
a3m_pair pci0000:80 0000:80:01.0 0000:81:00.0 82 1 0000:84:00.0 0000:86:00.0 enp134s0 0000:85:00.0 0000:87:00.0 enp135s0
a3m_pair pci0000:80 0000:80:02.0 0000:88:00.0 89 1 0000:8a:00.0 0000:8d:00.0 enp141s0 0000:8b:00.0 0000:8e:00.0 enp142s0

# --- p5 (illustrative) -----------------------------------------------------------
r=$here/p5
rm -rf "$r"
numa "$r" 0 0-47,96-143
numa "$r" 1 48-95,144-191
nic "$r" pci0000:00/0000:00:05.0 0 eth0
k=0
for g in 53 64 75 86 97 a8 b9 ca; do
    node=$((k / 4))
    rp=0000:00:1$k.0
    sw=0000:$(printf '%02x' $((0x$g - 2))):00.0
    bridge "$r" "pci0000:00/$rp" "$node"
    bridge "$r" "pci0000:00/$rp/$sw" "$node"
    dn=0000:$(printf '%02x' $((0x$g - 1)))
    bridge "$r" "pci0000:00/$rp/$sw/$dn:00.0" "$node"
    gpu "$r" "pci0000:00/$rp/$sw/$dn:00.0/0000:$g:00.0" "$node"
    for e in 1 2 3 4; do
        bus=$((0x$g + e))
        bridge "$r" "pci0000:00/$rp/$sw/$dn:0$e.0" "$node"
        nic "$r" "pci0000:00/$rp/$sw/$dn:0$e.0/0000:$(printf '%02x' $bus):00.0" "$node" - "rdmap${bus}s0"
    done
    k=$((k + 1))
done
