#!/usr/bin/env bash
# Installs Crucible on a node (run as root from a checkout).
#
#   deploy/install.sh               binaries, units, /etc/crucible/crucible.env (settings) and
#                                   /etc/crucible/{api,worker}.env (each role's REDIS_URL; root only)
#   deploy/install.sh redis [HOST...]
#                                   the broker node: /etc/crucible/redis.conf rendered from
#                                   deploy/redis.conf (an ACL user per role), its passwords, a
#                                   private CA and a server certificate naming HOST... (default:
#                                   this host's name, localhost, 127.0.0.1), the crucible-redis unit.
#                                   Run again after an upgrade: the passwords and certificates are
#                                   kept, the configuration is rendered anew.
#
# CRUCIBLE_ETC (default /etc/crucible) and CRUCIBLE_KEY_PREFIX (default crucible: the ACL users are
# bound to it) may be set. CRUCIBLE_NO_SYSTEMD=1 writes the broker's files only (the tests do).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ETC=${CRUCIBLE_ETC:-/etc/crucible}
CREDENTIALS=$ETC/redis-credentials
TLS=$ETC/redis-tls
PORT=6379

apt_install() {
  command -v "$1" >/dev/null 2>&1 && return 0
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}

# A private CA (kept here, 0600) and a server certificate for the names other nodes use.
make_certificates() {
  local hosts=("$@") san="" h
  for h in "${hosts[@]}"; do
    if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then san+="IP:$h,"; else san+="DNS:$h,"; fi
  done
  install -d -m 0750 "$TLS"
  ( umask 077
    openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 3650 \
      -subj "/CN=Crucible Redis CA" -keyout "$TLS/ca.key" -out "$TLS/ca.crt" 2>/dev/null
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
      -subj "/CN=${hosts[0]}" -keyout "$TLS/server.key" -out "$TLS/server.csr" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=critical,CA:FALSE\n' \
      "${san%,}" >"$TLS/server.ext"
    openssl x509 -req -in "$TLS/server.csr" -CA "$TLS/ca.crt" -CAkey "$TLS/ca.key" \
      -CAcreateserial -days 825 -extfile "$TLS/server.ext" -out "$TLS/server.crt" 2>/dev/null
    rm -f "$TLS/server.csr" "$TLS/server.ext" )
  chmod 0644 "$TLS/ca.crt" "$TLS/server.crt"
}

sha256() { printf %s "$1" | sha256sum | cut -d' ' -f1; }

install_redis() {
  local prefix=${CRUCIBLE_KEY_PREFIX:-crucible}
  [[ $prefix =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "CRUCIBLE_KEY_PREFIX=$prefix: use letters, digits, _ . -" >&2; exit 1; }
  local hosts=("$@")
  [ ${#hosts[@]} -gt 0 ] || hosts=("$(hostname -f 2>/dev/null || hostname)" localhost 127.0.0.1)
  apt_install openssl openssl
  [ -n "${CRUCIBLE_NO_SYSTEMD:-}" ] || apt_install redis-server redis-server
  # The ACL users use selectors and read-/write-only key patterns: Redis 7.0 or later.
  if command -v redis-server >/dev/null 2>&1 &&
    [ "$(redis-server --version | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')" -lt 7 ]; then
    echo "$(redis-server --version | cut -d' ' -f3): deploy/redis.conf needs Redis 7.0 or later" >&2
    exit 1
  fi
  install -d -m 0755 "$ETC"
  if [ -f "$CREDENTIALS" ]; then
    # shellcheck source=/dev/null
    source "$CREDENTIALS"
  else
    CRUCIBLE_API_PASSWORD=$(openssl rand -hex 24)
    CRUCIBLE_WORKER_PASSWORD=$(openssl rand -hex 24)
    CRUCIBLE_ADMIN_PASSWORD=$(openssl rand -hex 24)
  fi
  [ -f "$TLS/server.crt" ] || make_certificates "${hosts[@]}"
  local url_host=${hosts[0]}
  ( umask 077
    cat >"$CREDENTIALS" <<EOF
# Written by deploy/install.sh redis (root only). Passwords of the ACL users of $ETC/redis.conf.
CRUCIBLE_API_PASSWORD=$CRUCIBLE_API_PASSWORD
CRUCIBLE_WORKER_PASSWORD=$CRUCIBLE_WORKER_PASSWORD
CRUCIBLE_ADMIN_PASSWORD=$CRUCIBLE_ADMIN_PASSWORD
CRUCIBLE_REDIS_HOST=$url_host
# API nodes, $ETC/api.env:
#   REDIS_URL=rediss://crucible-api:$CRUCIBLE_API_PASSWORD@$url_host:$PORT
# Worker nodes, $ETC/worker.env:
#   REDIS_URL=rediss://crucible-worker:$CRUCIBLE_WORKER_PASSWORD@$url_host:$PORT
# Both, with a copy of $TLS/ca.crt: CRUCIBLE_REDIS_CA_FILE=$ETC/redis-ca.crt
# Operators: redis-cli --tls --cacert $TLS/ca.crt -h $url_host -p $PORT --user crucible-admin --askpass
EOF
  )
  local conf
  conf=$(sed -e "s/@CRUCIBLE_API_PASSWORD_SHA256@/$(sha256 "$CRUCIBLE_API_PASSWORD")/" \
    -e "s/@CRUCIBLE_WORKER_PASSWORD_SHA256@/$(sha256 "$CRUCIBLE_WORKER_PASSWORD")/" \
    -e "s/@CRUCIBLE_ADMIN_PASSWORD_SHA256@/$(sha256 "$CRUCIBLE_ADMIN_PASSWORD")/" \
    -e "s#~crucible:#~$prefix:#g" -e "s#/etc/crucible/redis-tls/#$TLS/#g" deploy/redis.conf)
  if grep -q '@CRUCIBLE_[A-Z_]*@' <<<"$conf"; then
    echo "deploy/redis.conf has a placeholder this script does not fill" >&2; exit 1
  fi
  ( umask 027; printf '%s\n' "$conf" >"$ETC/redis.conf" )
  install -m 0644 "$TLS/ca.crt" "$ETC/redis-ca.crt"
  if [ -n "${CRUCIBLE_NO_SYSTEMD:-}" ]; then return 0; fi
  chgrp redis "$ETC/redis.conf" "$TLS" "$TLS/server.key"
  chmod 0640 "$TLS/server.key"
  install -d -o redis -g redis -m 0750 /var/lib/crucible-redis
  install -m 0644 deploy/crucible-redis.service /etc/systemd/system/
  systemctl daemon-reload
  # Debian's own instance listens on 6379 without TLS or users.
  systemctl disable --now redis-server >/dev/null 2>&1 || true
  echo "the role URLs are in $CREDENTIALS; copy $ETC/redis-ca.crt to every node, then:"
  echo "  systemctl enable --now crucible-redis"
}

# A role's environment file: its REDIS_URL (from this node's credentials when it is the broker
# node) and the CA. Root only: systemd reads it before the service drops to the crucible user.
role_env() {
  local role=$1 user=$2 password=CHANGE-ME host=REDIS-HOST
  [ -f "$ETC/$role.env" ] && return 0
  if [ -f "$CREDENTIALS" ]; then
    # shellcheck source=/dev/null
    source "$CREDENTIALS"
    local var="CRUCIBLE_${role^^}_PASSWORD"
    password=${!var} host=$CRUCIBLE_REDIS_HOST
  fi
  ( umask 077
    printf '# The %s role of the broker (deploy/redis.conf); see %s on the Redis node.\n' "$role" "$CREDENTIALS"
    printf 'REDIS_URL=rediss://%s:%s@%s:%s\n' "$user" "$password" "$host" "$PORT"
    printf 'CRUCIBLE_REDIS_CA_FILE=%s/redis-ca.crt\n' "$ETC" ) >"$ETC/$role.env"
}

install_node() {
  cargo build --release --workspace --bins
  install -m 0755 target/release/crucible target/release/crucible-api target/release/crucible-worker /usr/local/bin/
  id crucible >/dev/null 2>&1 || useradd --system --home /var/lib/crucible --shell /usr/sbin/nologin crucible
  # Sandbox users of task children: eight per GPU (crucible-worker@.service names them), no
  # home, no login, in no group of anyone else's.
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  for g in $(seq 0 $(( ${gpus:-0} > 0 ? gpus - 1 : 0 ))); do
    for s in $(seq 0 7); do
      id "crucible-g$g-$s" >/dev/null 2>&1 ||
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
          --shell /usr/sbin/nologin "crucible-g$g-$s"
    done
  done
  install -d -o crucible -g crucible -m 0700 /var/lib/crucible
  install -d -m 0755 "$ETC"
  [ -f "$ETC/crucible.env" ] || install -m 0644 .env.example "$ETC/crucible.env"
  role_env api crucible-api
  role_env worker crucible-worker
  # The bootstrap admin secret: generated once, in the API's file only (workers never see it).
  if ! grep -q '^CRUCIBLE_ADMIN_TOKEN=' "$ETC/api.env"; then
    printf 'CRUCIBLE_ADMIN_TOKEN=%s\n' "$(openssl rand -hex 32)" >>"$ETC/api.env"
  fi
  install -m 0644 deploy/crucible-api.service deploy/crucible-worker@.service /etc/systemd/system/
  systemctl daemon-reload
  echo "edit $ETC/crucible.env (CRUCIBLE_PYTHON, ...) and the REDIS_URL of $ETC/api.env and"
  echo "$ETC/worker.env (with $ETC/redis-ca.crt from the Redis node), then:"
  echo "  systemctl enable --now crucible-api crucible-worker@0"
  echo "tenants: CRUCIBLE_TOKEN=<CRUCIBLE_ADMIN_TOKEN of $ETC/api.env> crucible tenants create NAME"
}

case "${1:-}" in
  redis) shift; install_redis "$@" ;;
  "") install_node ;;
  *) echo "usage: $0 [redis [HOST...]]" >&2; exit 2 ;;
esac
