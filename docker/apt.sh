#!/bin/sh
# The one way the build installs Debian packages: `sh /apt.sh PACKAGE...`, from the apt steps of
# docker/Dockerfile, which mount this file there and apt's lists and archive as caches for that step.
#
# The image keeps apt's downloads out of its layers (the cache mounts hold them), so Docker's own
# docker-clean hook, which deletes them after every install, goes. On Ubuntu, apt reads its index as
# Ubuntu's snapshot service had it at APT_SNAPSHOT (versions.lock resolve.apt_snapshot), so one commit
# installs the same packages every time; another distribution (a smoke build's Debian stand-in) is not
# pinned, and the step says so. apt's and dpkg's logs carry the build's date and time, so they go too:
# the same commit gives the same bytes.
set -eu
rm -f /etc/apt/apt.conf.d/docker-clean
if grep -qx 'ID=ubuntu' /etc/os-release; then
    apt-get update --snapshot "$APT_SNAPSHOT"
else
    echo "note: the base is not Ubuntu: apt is not pinned to snapshot $APT_SNAPSHOT"
    apt-get update
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
rm -f /var/log/dpkg.log /var/log/alternatives.log /var/log/apt/history.log /var/log/apt/term.log \
    /var/log/apt/eipp.log.xz /var/cache/ldconfig/aux-cache
