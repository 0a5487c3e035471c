#!/bin/bash
# Runs a command from a Debian 13 root filesystem, for hosts whose glibc is too old for
# the apptainer package. Apptainer rejects a plain chroot, so this enters a private mount
# namespace and pivots the root: the host's /proc, /sys, /dev and its non-system top-level
# directories (home, /root, /tmp, /work, ...) appear at the same paths inside.
set -euo pipefail
INNER='
set -euo pipefail
root=$1; cwd=$2; shift 2
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
for dir in /*/; do
  dir=${dir%/}
  case $dir in
    /bin|/boot|/dev|/etc|/lib|/lib32|/lib64|/libx32|/proc|/run|/sbin|/sys|/usr|/var) continue;;
    /lost+found) continue;;
  esac
  mkdir -p "$root$dir"
  mount --rbind "$dir" "$root$dir"
done
mount --rbind /var/tmp "$root/var/tmp"
for file in /etc/subuid /etc/subgid /etc/resolv.conf /etc/hosts /etc/localtime; do
  if [ -e "$file" ]; then touch "$root$file"; mount --bind "$file" "$root$file"; fi
done
mkdir -p "$root/.oldroot"
cd "$root"
pivot_root . .oldroot
umount -l /.oldroot
cd "$cwd" 2>/dev/null || cd /
exec "$@"
'
exec unshare --mount --propagation private -- /bin/bash -c "$INNER" enter-rootfs \
  "@ROOTFS@" "$PWD" "@COMMAND@" "$@"
