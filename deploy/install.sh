#!/usr/bin/env bash
# Installs Crucible on a node (run as root from a checkout). A node has one or more roles:
#
#   broker   Redis over TLS, an ACL user per role (crucible-redis.service), the role env files
#   api      an API replica (crucible-api.service) and the `crucible` CLI
#   worker   a worker per GPU (crucible-worker@N.service), their sandbox users, the CLI
#   all      all three on this node (the default)
#
# Several nodes (README, "Several nodes"), the broker node first: it writes every role's
# environment file (its REDIS_URL with the role's password) for the other nodes to copy.
#
#   broker$ deploy/install.sh --role broker --redis-bind 10.0.0.5
#           copy /etc/crucible/api.env and redis-ca.crt to each API node,
#                /etc/crucible/worker.env and redis-ca.crt to each worker node (root only, 0600)
#   api$    deploy/install.sh --role api --api-bind 0.0.0.0:10907
#   gpu$    deploy/install.sh --role worker
#
# Options:
#   --role ROLE[,ROLE]     broker, api, worker or all (default all); may be repeated.
#   --redis-bind ADDR      broker: an address of this node that other nodes reach Redis at (it
#                          always listens on loopback too); may be repeated. Without one, Redis
#                          serves this node alone.
#   --redis-name NAME      broker: a name other nodes use for this node, in its certificate and
#                          in the role URLs (the first one); may be repeated. Default: the
#                          --redis-bind addresses, else localhost.
#   --api-bind ADDR:PORT   api: where the API listens (CRUCIBLE_BIND in api.env; unset:
#                          127.0.0.1:10907). 0.0.0.0:10907 serves other hosts, and then requires
#                          bearer tokens (CRUCIBLE_ADMIN_TOKEN in api.env, made once).
#   --gpus N               worker: sandbox users for GPUs 0..N-1 (default: nvidia-smi's count).
#   --python PATH          worker: the Python with torch and triton (CRUCIBLE_PYTHON). Default:
#                          the one crucible.env names, else a venv made in /opt/crucible/venv.
#                          Not under /home or /root: the worker's unit cannot see them.
#   --bin-dir DIR          install the binaries found in DIR instead of building them.
#
#   deploy/install.sh redis [HOST...]    the earlier form of --role broker --redis-name HOST...
#
# Run it again after an upgrade: passwords, certificates (reissued from the same CA when the
# names change), the admin token and edited settings are kept; the configuration is rendered
# anew. Environment: CRUCIBLE_ETC (default /etc/crucible) and CRUCIBLE_KEY_PREFIX (default
# crucible: the ACL users are bound to it). DESTDIR=DIR stages the node under DIR (units,
# binaries, configuration, directories) and changes nothing on this host: no packages, users,
# ownership or systemctl (scripts/check_deploy.sh verifies the units it stages).
# CRUCIBLE_NO_SYSTEMD=1 writes the configuration under CRUCIBLE_ETC only (the tests do).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ETC=${CRUCIBLE_ETC:-/etc/crucible}
DEST=${DESTDIR:-}
CONFIG_ONLY=${CRUCIBLE_NO_SYSTEMD:-}
CREDENTIALS=$ETC/redis-credentials
TLS=$ETC/redis-tls
PORT=6379
# Where the units find things (crucible-*.service name the same paths).
BIN=/usr/local/bin
UNITS=/etc/systemd/system
WORKER_STATE=/var/lib/crucible-worker
WORKER_CACHE=/var/cache/crucible-worker
REDIS_STATE=/var/lib/crucible-redis
VENV=/opt/crucible/venv

die() { echo "install.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

# True when this run may change the host itself (packages, users, ownership, services).
on_host() { [ -z "$DEST" ] && [ -z "$CONFIG_ONLY" ]; }

apt_install() {
  command -v "$1" >/dev/null 2>&1 && return 0
  on_host || die "$1 is missing (install the $2 package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}

# --- Arguments ---------------------------------------------------------------------------------
ROLES=() REDIS_BINDS=() REDIS_NAMES=() API_BIND="" GPUS="" PYTHON="" BIN_DIR=""
if [ "${1:-}" = redis ]; then
  shift
  ROLES=(broker) REDIS_NAMES=("$@")
  set --
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --role) [ $# -ge 2 ] || usage; IFS=, read -ra more <<<"$2"; ROLES+=("${more[@]}"); shift 2 ;;
    --redis-bind) [ $# -ge 2 ] || usage; REDIS_BINDS+=("$2"); shift 2 ;;
    --redis-name) [ $# -ge 2 ] || usage; REDIS_NAMES+=("$2"); shift 2 ;;
    --api-bind) [ $# -ge 2 ] || usage; API_BIND=$2; shift 2 ;;
    --gpus) [ $# -ge 2 ] || usage; GPUS=$2; shift 2 ;;
    --python) [ $# -ge 2 ] || usage; PYTHON=$2; shift 2 ;;
    --bin-dir) [ $# -ge 2 ] || usage; BIN_DIR=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "install.sh: unknown argument $1" >&2; usage ;;
  esac
done
[ ${#ROLES[@]} -gt 0 ] || ROLES=(all)
BROKER="" API="" WORKER=""
for r in "${ROLES[@]}"; do
  case "$r" in
    broker) BROKER=1 ;; api) API=1 ;; worker) WORKER=1 ;; all) BROKER=1 API=1 WORKER=1 ;;
    *) die "unknown role $r (broker, api, worker or all)" ;;
  esac
done
for a in "${REDIS_BINDS[@]}"; do
  [[ $a =~ ^[0-9A-Fa-f.:]+$ ]] || die "--redis-bind $a: give an IP address of this node"
done
if [ -n "$API_BIND" ] && ! [[ $API_BIND =~ ^(\[[0-9A-Fa-f:]+\]|[0-9.]+|[A-Za-z0-9.-]+):[0-9]+$ ]]; then
  die "--api-bind $API_BIND: give ADDRESS:PORT, e.g. 0.0.0.0:10907"
fi
[ -z "$GPUS" ] || [[ $GPUS =~ ^[0-9]+$ ]] || die "--gpus $GPUS: give a number"

# --- Files -------------------------------------------------------------------------------------
# Sets KEY=VALUE in an environment file (replacing the line, or appending), keeping its mode.
set_env() {
  local file=$1 key=$2 value=$3 tmp
  tmp=$(mktemp "$file.XXXXXX")
  if [ -f "$file" ]; then
    awk -v k="$key" -v line="$key=$value" 'BEGIN { done = 0 }
      index($0, k "=") == 1 { if (!done) print line; done = 1; next } { print }
      END { if (!done) print line }' "$file" >"$tmp"
    chmod --reference="$file" "$tmp"
  else
    printf '%s=%s\n' "$key" "$value" >"$tmp"
    chmod 0600 "$tmp"
  fi
  mv "$tmp" "$file"
}

# The value of KEY in an environment file ("" when unset or commented out).
get_env() {
  if [ -f "$1" ]; then sed -n "s/^$2=//p" "$1" | tail -n1; fi
}

node_env() {
  install -d -m 0755 "$DEST$ETC"
  [ -f "$DEST$ETC/crucible.env" ] || install -m 0644 .env.example "$DEST$ETC/crucible.env"
}

# Binaries: from --bin-dir, or built here. `crucible` (doctor, tenants) goes with every role
# that runs a Crucible process.
install_binaries() {
  local names=("$@") dir=$BIN_DIR n
  if [ -z "$dir" ]; then
    local args=()
    for n in "${names[@]}"; do args+=(--bin "$n"); done
    cargo build --release -p crucible-cli -p crucible-api-server -p crucible-gpu-worker "${args[@]}"
    dir=target/release
  fi
  install -d -m 0755 "$DEST$BIN"
  for n in "${names[@]}"; do
    [ -x "$dir/$n" ] || die "$dir/$n is missing"
    install -m 0755 "$dir/$n" "$DEST$BIN/"
  done
}

install_unit() {
  install -d -m 0755 "$DEST$UNITS"
  install -m 0644 "deploy/$1" "$DEST$UNITS/"
}

# --- Broker ------------------------------------------------------------------------------------
# A private CA (kept here, 0600) and, from it, the server certificate.
make_ca() {
  install -d -m 0750 "$DEST$TLS"
  ( umask 077
    openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 3650 \
      -subj "/CN=Crucible Redis CA" -keyout "$DEST$TLS/ca.key" -out "$DEST$TLS/ca.crt" 2>/dev/null )
  chmod 0644 "$DEST$TLS/ca.crt"
}

# The server certificate for the names other nodes use (IP addresses and DNS names).
issue_server_certificate() {
  local names=("$@") san="" h dir=$DEST$TLS
  for h in "${names[@]}"; do
    if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then san+="IP:$h,"; else san+="DNS:$h,"; fi
  done
  ( umask 077
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
      -subj "/CN=${names[0]}" -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=critical,CA:FALSE\n' \
      "${san%,}" >"$dir/server.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
      -CAcreateserial -days 825 -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
    rm -f "$dir/server.csr" "$dir/server.ext" )
  chmod 0644 "$dir/server.crt"
}

# Whether the server certificate names every one of its arguments.
certificate_names() {
  local text h
  text=$(openssl x509 -in "$DEST$TLS/server.crt" -noout -ext subjectAltName 2>/dev/null) || return 1
  for h in "$@"; do
    if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then
      grep -qiE "IP Address:$h(,|$)" <<<"$text" || return 1
    else
      grep -qiE "DNS:$h(,|$)" <<<"$text" || return 1
    fi
  done
}

sha256() { printf %s "$1" | sha256sum | cut -d' ' -f1; }

# The REDIS_URL of a role's ACL user, and the CA, in $ETC/<role>.env: the files every node of
# that role needs (copied there from this node). Root only: systemd reads them before the
# service drops privileges.
write_role_env() {
  local role=$1 user=$2 password=$3 host=$4 file=$DEST$ETC/$1.env
  if [ ! -f "$file" ]; then
    ( umask 077; printf '# The %s role of the broker (deploy/redis.conf), written by deploy/install.sh on the broker node.\n' "$role" >"$file" )
  fi
  set_env "$file" REDIS_URL "rediss://$user:$password@$host:$PORT"
  set_env "$file" CRUCIBLE_REDIS_CA_FILE "$ETC/redis-ca.crt"
}

install_broker() {
  local prefix=${CRUCIBLE_KEY_PREFIX:-crucible}
  [[ $prefix =~ ^[A-Za-z0-9_.-]+$ ]] || die "CRUCIBLE_KEY_PREFIX=$prefix: use letters, digits, _ . -"
  apt_install openssl openssl
  on_host && apt_install redis-server redis-server
  # The ACL users use selectors and read-/write-only key patterns: Redis 7.0 or later.
  if command -v redis-server >/dev/null 2>&1 &&
    [ "$(redis-server --version | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')" -lt 7 ]; then
    die "$(redis-server --version | cut -d' ' -f3): deploy/redis.conf needs Redis 7.0 or later"
  fi
  # The first name is the URL's host: a bound address, or loopback when none is (a host name
  # may resolve to 127.0.1.1, which Redis does not listen on).
  local names=("${REDIS_NAMES[@]}")
  [ ${#names[@]} -gt 0 ] || names=("${REDIS_BINDS[@]}")
  [ ${#names[@]} -gt 0 ] || names=(localhost)
  # The certificate also names the bound addresses and loopback (operators on this node).
  local cert_names=() h seen=" "
  for h in "${names[@]}" "${REDIS_BINDS[@]}" localhost 127.0.0.1; do
    [[ $seen == *" $h "* ]] || { cert_names+=("$h"); seen+="$h "; }
  done
  install -d -m 0755 "$DEST$ETC"
  if [ -f "$DEST$CREDENTIALS" ]; then
    # shellcheck source=/dev/null
    source "$DEST$CREDENTIALS"
  else
    CRUCIBLE_API_PASSWORD=$(openssl rand -hex 24)
    CRUCIBLE_WORKER_PASSWORD=$(openssl rand -hex 24)
    CRUCIBLE_ADMIN_PASSWORD=$(openssl rand -hex 24)
  fi
  [ -f "$DEST$TLS/ca.crt" ] || make_ca
  if [ ! -f "$DEST$TLS/server.crt" ] || ! certificate_names "${cert_names[@]}"; then
    issue_server_certificate "${cert_names[@]}"
  fi
  local url_host=${names[0]}
  ( umask 077
    cat >"$DEST$CREDENTIALS" <<EOF
# Written by deploy/install.sh on the broker node (root only). Passwords of the ACL users of
# $ETC/redis.conf; each role's REDIS_URL is in $ETC/api.env and $ETC/worker.env.
CRUCIBLE_API_PASSWORD=$CRUCIBLE_API_PASSWORD
CRUCIBLE_WORKER_PASSWORD=$CRUCIBLE_WORKER_PASSWORD
CRUCIBLE_ADMIN_PASSWORD=$CRUCIBLE_ADMIN_PASSWORD
CRUCIBLE_REDIS_HOST=$url_host
# Operators: redis-cli --tls --cacert $TLS/ca.crt -h $url_host -p $PORT --user crucible-admin --askpass
EOF
  )
  # The bind line: loopback always, then the addresses given (none: this node only).
  local conf
  conf=$(sed -e "s/@CRUCIBLE_API_PASSWORD_SHA256@/$(sha256 "$CRUCIBLE_API_PASSWORD")/" \
    -e "s/@CRUCIBLE_WORKER_PASSWORD_SHA256@/$(sha256 "$CRUCIBLE_WORKER_PASSWORD")/" \
    -e "s/@CRUCIBLE_ADMIN_PASSWORD_SHA256@/$(sha256 "$CRUCIBLE_ADMIN_PASSWORD")/" \
    -e "s/ *@CRUCIBLE_REDIS_BIND@/${REDIS_BINDS[*]:+ ${REDIS_BINDS[*]}}/" \
    -e "s#~crucible:#~$prefix:#g" -e "s#/etc/crucible/redis-tls/#$TLS/#g" deploy/redis.conf)
  if grep -q '@CRUCIBLE_[A-Z_]*@' <<<"$conf"; then
    die "deploy/redis.conf has a placeholder this script does not fill"
  fi
  ( umask 027; printf '%s\n' "$conf" >"$DEST$ETC/redis.conf" )
  install -m 0644 "$DEST$TLS/ca.crt" "$DEST$ETC/redis-ca.crt"
  write_role_env api crucible-api "$CRUCIBLE_API_PASSWORD" "$url_host"
  write_role_env worker crucible-worker "$CRUCIBLE_WORKER_PASSWORD" "$url_host"
  # The bootstrap admin secret, made once with the API's file, so that every API replica (each
  # gets a copy of this file) accepts the same one. Workers never see it.
  if [ -z "$(get_env "$DEST$ETC/api.env" CRUCIBLE_ADMIN_TOKEN)" ]; then
    set_env "$DEST$ETC/api.env" CRUCIBLE_ADMIN_TOKEN "$(openssl rand -hex 32)"
  fi
  [ -z "$CONFIG_ONLY" ] || return 0
  install -d -m 0750 "$DEST$REDIS_STATE"
  install_unit crucible-redis.service
  if on_host; then
    chgrp redis "$ETC/redis.conf" "$TLS" "$TLS/server.key"
    chmod 0640 "$TLS/server.key"
    chown redis:redis "$REDIS_STATE"
    # Debian's own instance listens on 6379 without TLS or users.
    systemctl disable --now redis-server >/dev/null 2>&1 || true
  fi
  if [ ${#REDIS_BINDS[@]} -eq 0 ] && { [ -z "$API" ] || [ -z "$WORKER" ]; }; then
    echo "note: no --redis-bind: Redis listens on loopback only, other nodes cannot reach it" >&2
  fi
  NEXT+=("systemctl enable --now crucible-redis")
  if [ -z "$API" ]; then NEXT+=("copy $ETC/api.env and $ETC/redis-ca.crt (0600/0644) to every API node"); fi
  if [ -z "$WORKER" ]; then NEXT+=("copy $ETC/worker.env and $ETC/redis-ca.crt (0600/0644) to every worker node"); fi
}

# --- API and worker ----------------------------------------------------------------------------
# A role's env file must be there (written by the broker role here, or copied from the broker
# node), with a real REDIS_URL and its CA.
require_role_env() {
  local role=$1 file=$DEST$ETC/$1.env url ca
  [ -f "$file" ] || die "$ETC/$role.env is missing: copy it and $ETC/redis-ca.crt from the broker node (deploy/install.sh --role broker writes them)"
  url=$(get_env "$file" REDIS_URL)
  [ -n "$url" ] || die "$ETC/$role.env has no REDIS_URL (rediss://crucible-$role:PASSWORD@BROKER:$PORT)"
  [[ $url != *CHANGE-ME* && $url != *REDIS-HOST* ]] ||
    die "$ETC/$role.env still has a placeholder REDIS_URL: copy the file from the broker node"
  ca=$(get_env "$file" CRUCIBLE_REDIS_CA_FILE)
  [ -z "$ca" ] || [ -f "$DEST$ca" ] || die "$ca is missing: copy $ETC/redis-ca.crt from the broker node"
  chmod 0600 "$file"
}

install_api() {
  require_role_env api
  node_env
  local file=$DEST$ETC/api.env
  [ -z "$API_BIND" ] || set_env "$file" CRUCIBLE_BIND "$API_BIND"
  if [ -z "$(get_env "$file" CRUCIBLE_ADMIN_TOKEN)" ]; then
    set_env "$file" CRUCIBLE_ADMIN_TOKEN "$(openssl rand -hex 32)"
    echo "note: made CRUCIBLE_ADMIN_TOKEN in $ETC/api.env: give every API replica the same one" >&2
  fi
  [ -z "$CONFIG_ONLY" ] || return 0
  on_host && { id crucible >/dev/null 2>&1 ||
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin crucible; }
  install_binaries crucible-api crucible
  install_unit crucible-api.service
  NEXT+=("systemctl enable --now crucible-api")
  NEXT+=("tenants: CRUCIBLE_TOKEN=<CRUCIBLE_ADMIN_TOKEN of $ETC/api.env> crucible tenants create NAME")
}

# The Python the worker runs children with: given, named in crucible.env, or a venv made in
# /opt (scripts/env.sh, the same one scripts/up.sh makes in ~/.cache).
worker_python() {
  local env=$DEST$ETC/crucible.env python=$PYTHON
  [ -n "$python" ] || python=$(get_env "$env" CRUCIBLE_PYTHON)
  if [ -z "$python" ]; then
    if ! on_host; then
      echo "note: no --python: CRUCIBLE_PYTHON left unset in $ETC/crucible.env" >&2
      return 0
    fi
    # shellcheck source=/dev/null
    source scripts/env.sh
    CRUCIBLE_VENV=$VENV CRUCIBLE_FORCE_VENV=1 ensure_python
    python=$CRUCIBLE_PYTHON
  fi
  check_python "$python"
  set_env "$env" CRUCIBLE_PYTHON "$python"
}

check_python() {
  case "$1" in
    /home/*|/root/*|/run/user/*)
      die "CRUCIBLE_PYTHON=$1: the worker's unit cannot see /home, /root or /run/user (ProtectHome=yes); install the Python elsewhere, e.g. CRUCIBLE_VENV=$VENV (scripts/env.sh)" ;;
    /*) ;;
    *) die "CRUCIBLE_PYTHON=$1: give an absolute path" ;;
  esac
}

install_worker() {
  require_role_env worker
  node_env
  worker_python
  [ -z "$CONFIG_ONLY" ] || return 0
  local gpus=$GPUS g s
  [ -n "$gpus" ] || gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "${gpus:-0}" -gt 0 ] || gpus=1
  # Sandbox users of task children: eight per GPU (crucible-worker@.service names them), no
  # home, no login, in no group of anyone else's.
  if on_host; then
    for g in $(seq 0 $((gpus - 1))); do
      for s in $(seq 0 7); do
        id "crucible-g$g-$s" >/dev/null 2>&1 ||
          useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "crucible-g$g-$s"
      done
    done
  fi
  # The unit's StateDirectory= and CacheDirectory= (systemd makes them too, with these modes).
  install -d -m 0755 "$DEST$WORKER_STATE" "$DEST$WORKER_CACHE"
  for g in $(seq 0 $((gpus - 1))); do install -d -m 0711 "$DEST$WORKER_STATE/gpu$g"; done
  install -d -m 0700 "$DEST$WORKER_CACHE/builds"
  install_binaries crucible-worker crucible
  install_unit crucible-worker@.service
  local units=""
  for g in $(seq 0 $((gpus - 1))); do units+=" crucible-worker@$g"; done
  NEXT+=("crucible doctor --role worker --env-file $ETC/crucible.env --env-file $ETC/worker.env")
  NEXT+=("systemctl enable --now$units")
}

NEXT=()
[ -z "$PYTHON" ] || check_python "$PYTHON"
[ -z "$BROKER" ] || install_broker
[ -z "$API" ] || install_api
[ -z "$WORKER" ] || install_worker
if on_host; then systemctl daemon-reload; fi
if [ ${#NEXT[@]} -gt 0 ]; then
  echo "installed (${ROLES[*]}); settings in $ETC/crucible.env. Next:"
  printf '  %s\n' "${NEXT[@]}"
fi
