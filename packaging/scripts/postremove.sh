#!/bin/sh
# Lakeside package, after the files are removed.
#
# deb: $1 is remove, purge, upgrade, failed-upgrade, abort-install,
# abort-upgrade or disappear.
# rpm: $1 is 0 on erase, 1 or more on upgrade.
#
# Removal keeps the configuration and the state in /var/lib/lakeside, so that
# a reinstall carries on where the agent stopped. Purge (deb only; rpm has no
# purge) deletes the state, the local Delta tables under it and the
# environment file; dpkg deletes the configuration file itself. The lakeside
# user is kept, as is customary for system users. Running it again changes
# nothing. systemctl is called only when systemd runs.
set -e

case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	;;
purge)
	rm -rf /var/lib/lakeside
	rm -f /etc/lakeside/environment /etc/lakeside/lakeside.yaml.dpkg-old \
		/etc/lakeside/lakeside.yaml.dpkg-dist /etc/lakeside/lakeside.yaml.dpkg-new
	rmdir /etc/lakeside 2>/dev/null || true
	;;
esac
exit 0
