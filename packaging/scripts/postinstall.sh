#!/bin/sh
# Lakeside package, after the files are unpacked.
#
# deb: $1 is configure (with $2 the version configured before, empty on a
# fresh install), abort-upgrade, abort-remove or abort-deconfigure.
# rpm: $1 is 1 on install, 2 or more on upgrade.
#
# Makes sure the lakeside user and the state directory /var/lib/lakeside
# exist, and restarts a running agent after an upgrade. A fresh install does
# not enable or start the service: the configuration needs editing first.
# The operator's configuration and the state are never touched on upgrade.
# Running it again changes nothing. systemctl is called only when systemd
# runs (not in a chroot or an image build).
set -e

# create_user creates the lakeside system user and group unless the user
# exists: with systemd-sysusers, from the entry also installed as
# /usr/lib/sysusers.d/lakeside.conf, or with useradd where systemd-sysusers is
# missing or fails. (The same function is in preinstall.sh.)
create_user() {
	if getent passwd lakeside >/dev/null; then
		return 0
	fi
	if command -v systemd-sysusers >/dev/null 2>&1 &&
		systemd-sysusers --replace=/usr/lib/sysusers.d/lakeside.conf --inline \
			'u lakeside - "Lakeside change capture agent" /var/lib/lakeside /usr/sbin/nologin' &&
		getent passwd lakeside >/dev/null; then
		return 0
	fi
	if getent group lakeside >/dev/null; then
		set -- --gid lakeside
	else
		set -- --user-group
	fi
	useradd --system "$@" --home-dir /var/lib/lakeside --no-create-home \
		--shell /usr/sbin/nologin --comment "Lakeside change capture agent" lakeside
}

# setup creates the user and the state directory (owned by lakeside, 0750),
# which the agent also needs when started without systemd.
setup() {
	create_user
	mkdir -p /var/lib/lakeside
	chown lakeside:lakeside /var/lib/lakeside
	chmod 0750 /var/lib/lakeside
}

# fresh_config gives a newly installed configuration file its group, in case
# the user did not exist yet when it was unpacked.
fresh_config() {
	if [ -f /etc/lakeside/lakeside.yaml ]; then
		chown root:lakeside /etc/lakeside/lakeside.yaml
		chmod 0640 /etc/lakeside/lakeside.yaml
	fi
}

# reload makes systemd read the new unit file.
reload() {
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
}

# restart restarts the agent if it runs, so that the new binary takes over.
restart() {
	if [ -d /run/systemd/system ]; then
		systemctl try-restart lakeside.service || true
	fi
}

case "$1" in
configure)
	setup
	if [ -z "$2" ]; then
		fresh_config
	fi
	reload
	if [ -n "$2" ]; then
		restart
	fi
	;;
1)
	setup
	fresh_config
	reload
	;;
[0-9]*)
	setup
	reload
	restart
	;;
esac
exit 0
