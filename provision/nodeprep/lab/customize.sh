set -eu
root="$1"
echo nodeprep-lab > "$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 nodeprep-lab\n' > "$root/etc/hosts"
printf 'LABEL=@ROOT@ / ext4 defaults 0 1\nLABEL=@DATA@ /data ext4 defaults,nofail 0 2\n' > "$root/etc/fstab"
mkdir -p "$root/data"
# Unprivileged ICMP sockets: ping works without file capabilities, which mkfs -d drops.
printf 'net.ipv4.ping_group_range = 0 2147483647\n' > "$root/etc/sysctl.d/60-nodeprep-ping.conf"
chroot "$root" useradd --create-home --shell /bin/bash --groups sudo @USER@
chroot "$root" passwd --lock @USER@
chroot "$root" passwd --lock root
printf '@USER@ ALL=(ALL) NOPASSWD:ALL\n' > "$root/etc/sudoers.d/@USER@"
chmod 0440 "$root/etc/sudoers.d/@USER@"
install -d -m 0700 "$root/home/@USER@/.ssh"
printf '%s\n' '@PUBKEY@' > "$root/home/@USER@/.ssh/authorized_keys"
chmod 0600 "$root/home/@USER@/.ssh/authorized_keys"
chroot "$root" chown -R @USER@:@USER@ /home/@USER@/.ssh
printf 'PasswordAuthentication no\nKbdInteractiveAuthentication no\nUseDNS no\n' \
  > "$root/etc/ssh/sshd_config.d/nodeprep.conf"
printf '[main]\nno-auto-default=*\n' > "$root/etc/NetworkManager/conf.d/90-nodeprep.conf"
cat > "$root/etc/NetworkManager/system-connections/mgmt.nmconnection" <<NM
[connection]
id=mgmt
type=ethernet
autoconnect=true
[ethernet]
mac-address=@MGMT_MAC@
[ipv4]
method=auto
[ipv6]
method=ignore
NM
chmod 0600 "$root/etc/NetworkManager/system-connections/mgmt.nmconnection"
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
    man-db.timer dpkg-db-backup.timer e2scrub_reap.service NetworkManager-wait-online.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
rm -f "$root/etc/ssh/ssh_host_"*
printf '[Unit]\nBefore=ssh.service\nConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\n[Service]\nType=oneshot\nExecStart=/usr/bin/ssh-keygen -A\n[Install]\nWantedBy=multi-user.target\n' \
  > "$root/etc/systemd/system/nodeprep-hostkeys.service"
ln -sf ../nodeprep-hostkeys.service "$root/etc/systemd/system/multi-user.target.wants/nodeprep-hostkeys.service"
: > "$root/etc/machine-id"
