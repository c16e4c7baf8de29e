// Package packaging holds what the lakeside .deb and .rpm packages are made
// of: the nfpm configuration (nfpm.yaml), the maintainer scripts (scripts/),
// the sysusers.d entry of the lakeside user (sysusers.conf) and the default
// configuration installed as /etc/lakeside/lakeside.yaml (lakeside.yaml),
// and the Prometheus alerting rules (prometheus/lakeside-alerts.yml, with
// their promtool tests). `make package` builds the packages.
//
// It has no Go code of its own: its test builds the packages, installs the
// .deb on the machine it runs on, upgrades and purges it, and queries the
// .rpm. That test needs root, dpkg, rpm, systemd-analyze and the nfpm binary
// that `make deps` installs into bin/; the test of the alerting rules needs
// promtool, which `make deps` installs too.
package packaging
