#!/usr/bin/env bash
# apt-install.sh PACKAGE...: install Debian packages for the tests without starting any
# service they ship (nginx would listen on 0.0.0.0:80, prometheus on :9090). Run as root.
set -euo pipefail
[ $# -gt 0 ] || exit 0
export DEBIAN_FRONTEND=noninteractive
made_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
fi
trap '[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; }
