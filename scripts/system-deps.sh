#!/usr/bin/env bash
# Install the system packages the tests need, only when they are missing:
# prometheus + promtool (exporter/compose tests), prometheus-pushgateway
# (exporter push test), nginx (proxy tests),
# chromium (HTML report rendering test), openssl (TLS connection test).
# Needs root (or sudo) and apt-get.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool   >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-pushgateway >/dev/null 2>&1 || need+=(prometheus-pushgateway)
command -v nginx      >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v chromium   >/dev/null 2>&1 || need+=(chromium fonts-liberation)  # fonts: a recommends we skip
command -v openssl    >/dev/null 2>&1 || need+=(openssl)  # the TLS test's self-signed certificate
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: missing ${need[*]} and no apt-get here; install them by hand" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "system-deps: installing ${need[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
