#!/usr/bin/env bash
# Installs Crucible's binaries, units and config on a node (run as root from a built checkout).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --workspace --bins
install -m 0755 target/release/crucible target/release/crucible-api target/release/crucible-worker /usr/local/bin/
id crucible >/dev/null 2>&1 || useradd --system --home /var/lib/crucible --shell /usr/sbin/nologin crucible
install -d -o crucible -g crucible -m 0700 /var/lib/crucible
install -d -m 0755 /etc/crucible
[ -f /etc/crucible/crucible.env ] || install -m 0640 .env.example /etc/crucible/crucible.env
# The bootstrap admin secret: generated once, for the API's unit only (workers never see it).
if [ ! -f /etc/crucible/api.env ]; then
  (umask 077 && printf 'CRUCIBLE_ADMIN_TOKEN=%s\n' "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" >/etc/crucible/api.env)
fi
install -m 0644 deploy/crucible-api.service deploy/crucible-worker@.service /etc/systemd/system/
systemctl daemon-reload
echo "edit /etc/crucible/crucible.env (REDIS_URL, CRUCIBLE_PYTHON, CRUCIBLE_BIND), then:"
echo "  systemctl enable --now crucible-api crucible-worker@0"
echo "tenants: CRUCIBLE_TOKEN=<CRUCIBLE_ADMIN_TOKEN of /etc/crucible/api.env> crucible tenants create NAME"
