#!/usr/bin/env bash
# Checks deploy/ (docs/OPERATIONS.md, "Checks in CI"); installs promtool and systemd-analyze
# from Debian when missing. Run by scripts/test.sh.
#
#  1. the alert rules and the Prometheus config parse (promtool check rules / check config);
#  2. the alerts' unit tests pass (promtool test rules deploy/prometheus/alerts.test.yml);
#  3. the Grafana dashboard is sound and names only exported metrics, as the alerts do, and
#     each panel's expression parses (scripts/check_dashboard.py, then promtool);
#  4. install.sh stages a node of every role (DESTDIR, stub binaries), and every path its units
#     name is one it made;
#  5. systemd-analyze verify finds nothing to say about those units (--root: the staged tree,
#     with this machine's own units for the targets they name), and their exposure stays
#     within bounds: 4.0 for the API and the broker, 6.0 for the worker.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
ensure_promtool
ensure_systemd_analyze
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log "promtool: rules, config, alert tests"
"$PROMTOOL" check rules deploy/prometheus/alerts.yml
"$PROMTOOL" check config deploy/prometheus.yml
"$PROMTOOL" test rules deploy/prometheus/alerts.test.yml

log "dashboard"
python3 scripts/check_dashboard.py --emit-rules "$work/dashboard-rules.yml" \
  deploy/grafana/crucible.json deploy/prometheus/alerts.yml
"$PROMTOOL" check rules "$work/dashboard-rules.yml" >/dev/null

log "install.sh: a node of every role, staged"
root=$work/root
mkdir -p "$work/bin"
for b in crucible crucible-api crucible-worker; do
  printf '#!/bin/sh\nexit 0\n' >"$work/bin/$b"
  chmod 0755 "$work/bin/$b"
done
DESTDIR=$root bash deploy/install.sh --role all --redis-bind 10.0.0.5 --redis-name queue.example \
  --api-bind 0.0.0.0:10907 --gpus 2 --python /opt/crucible/venv/bin/python --bin-dir "$work/bin" \
  >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; exit 1; }
grep -qx 'bind 127.0.0.1 -::1 10.0.0.5' "$root/etc/crucible/redis.conf" ||
  { echo "redis.conf does not bind --redis-bind's address" >&2; exit 1; }
grep -qx 'CRUCIBLE_BIND=0.0.0.0:10907' "$root/etc/crucible/api.env" ||
  { echo "api.env has no CRUCIBLE_BIND from --api-bind" >&2; exit 1; }

# Every absolute path a unit names (%i as GPU 0), and the directories of StateDirectory= and
# CacheDirectory=, must exist in the staged tree. /usr/bin/redis-server is Debian's package,
# which install.sh installs with apt on a broker node (not when staging).
unit_paths() {
  local key value v
  sed -e 's/%i/0/g' "$@" | while IFS='=' read -r key value; do
    case "$key" in
      EnvironmentFile|ExecStart|WorkingDirectory)
        v=${value%% *}
        while [[ $v == [-@+!:]* ]]; do v=${v:1}; done
        echo "$v" ;;
      StateDirectory) for v in $value; do echo "/var/lib/$v"; done ;;
      CacheDirectory) for v in $value; do echo "/var/cache/$v"; done ;;
    esac
  done
}
units=$root/etc/systemd/system
missing=0 named=0
while read -r path; do
  named=$((named + 1))
  [ "$path" = /usr/bin/redis-server ] && continue
  if [ ! -e "$root$path" ]; then echo "a unit names $path, which install.sh does not make" >&2; missing=1; fi
done < <(unit_paths "$units"/crucible-*.service)
[ "$named" -ge 10 ] || { echo "found only $named paths in the units" >&2; exit 1; }
[ "$missing" -eq 0 ]

log "systemd-analyze: verify and exposure"
mkdir -p "$root/usr/bin" "$root/usr/lib/systemd"
printf '#!/bin/sh\nexit 0\n' >"$root/usr/bin/redis-server"
chmod 0755 "$root/usr/bin/redis-server"
# The targets and slices the units order themselves against.
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
instances=(crucible-api.service crucible-redis.service crucible-worker@0.service)
# verify warns on stderr (an unknown key, a bad value) and still exits 0: any output fails.
out=$(cd "$units" && systemd-analyze verify --root="$root" "${instances[@]}" 2>&1) ||
  { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
# --threshold is on the 0-100 scale the score is shown divided by ten.
for unit in "${instances[@]}"; do
  case "$unit" in crucible-worker@*) bound=60 ;; *) bound=40 ;; esac
  if ! out=$(cd "$units" && systemd-analyze security --offline=true --root="$root" \
    --threshold="$bound" "$unit" 2>&1); then
    echo "$out" | grep -v '✓' >&2
    echo "$unit: exposure above $((bound / 10)).0" >&2
    exit 1
  fi
  echo "$out" | tail -n1
done
log "deploy checks passed"
