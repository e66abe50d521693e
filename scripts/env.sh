# Sourced by the other scripts: finds or installs what Crucible needs on this machine.
# Nothing here downloads from outside PyPI and Debian's archive.

crucible_root() { cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd; }

log() { printf '[crucible] %s\n' "$*" >&2; }

# Installs Debian packages from the archive (as root, or through sudo), without recommends.
apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# A Python with torch and triton. Order: $CRUCIBLE_PYTHON, then a python3 that already has
# torch, then the cached venv (created on first use, reused afterwards: 5.4 GB; 1 min 51 s on a
# 2-core machine with a fast mirror, ~5 min on a fresh one, both measured 2026-11-28; it says
# what it took when done).
crucible_venv() { printf '%s' "${CRUCIBLE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/crucible/venv}"; }

# The Python that tests the trainer adapters against the real upstream packages
# (crucible_client.cookbook: tinker-cookbook; crucible_client.skyrl: skyrl-gym;
# crucible_client.openenv_env and the OpenEnv endpoint: openenv-core;
# crucible_client.verifiers_env: verifiers, whose chat harness runs as a uv script, so uv too;
# crucible_client/openrlhf_reward.py: openrlhf's reward loader, installed without its
# dependencies, since they are GPU-only builds (deepspeed, flash-attn, vllm, ray), with the two
# its loader imports; crucible_client.verl_agent_loop: verl; crucible_client.trl_env and the TRL
# reward functions: trl; crucible_client.nemo_gym_server: nemo-gym's resources-server base and
# models (nemo_gym.base_resources_server, resources_servers.gymnasium), installed without its
# dependencies and with --ignore-requires-python: it declares Python >= 3.12, which Debian 12
# and CI lack, yet its code is 3.11 syntax and those modules run on 3.11 (its tests pass here);
# its dependencies would pin openai <= 2.7.2 against verifiers' >= 2.54 (those modules work
# with verifiers' openai) and pull mlflow, mcp and anthropic, which those modules do not
# import, so only what they import is installed (ray, wandb, hydra-core, yappi, gprof2dot,
# pydot, orjson, itsdangerous, fastapi, uvicorn, openai, pandas)): a venv of its own beside the
# main one (they pull transformers, datasets and the tinker SDK, kept out of the harness's),
# that sees the main one's torch through a .pth file; made on first use (about six minutes),
# reused afterwards, and made again when it cannot import every package below (a venv made
# before one was added). Prints the interpreter's path; needs ensure_python first.
# verl 0.9.1's agent loop imports cachetools, uvicorn and fastapi without declaring them; TRL's
# tool calling needs jmespath below transformers 5.13 (verl caps transformers under 5.11).
TRAINER_PACKAGES=('tinker-cookbook>=0.5' 'skyrl-gym>=0.4' 'openenv-core>=0.3' 'verifiers>=0.4'
  uv aiohttp pylatexenc 'verl>=0.9.1,<0.10' cachetools uvicorn fastapi 'trl>=1.16,<2' jmespath
  ray wandb hydra-core yappi gprof2dot pydot orjson itsdangerous openai pandas)
TRAINER_NO_DEPS_PACKAGES=('openrlhf==0.11.2' 'nemo-gym==0.4.0')
# What each of those is imported as: a cached venv that lacks one is made again.
TRAINER_MODULES=(tinker_cookbook skyrl_gym openenv.core.env_client verifiers.v1 aiohttp pylatexenc
  openrlhf.utils.agent verl.experimental.agent_loop trl jmespath nemo_gym.base_resources_server
  resources_servers.gymnasium torch httpx tenacity pytest)
ensure_trainers_python() {
  local venv torch_dir imports
  venv="${CRUCIBLE_TRAINERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/crucible/trainers-venv}"
  imports="$(printf 'import %s; ' "${TRAINER_MODULES[@]}")"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$imports" 2>/dev/null &&
    [ -x "$venv/bin/uv" ]; then
    printf '%s' "$venv/bin/python"; return 0
  fi
  log "creating the trainer packages' test environment in $venv (first time only)"
  # Made in place, not renamed into it: a venv's scripts (uv, vf-eval) name its path in their
  # first line. One left half-made fails the import check above and is made again.
  rm -rf "$venv"
  "$CRUCIBLE_PYTHON" -m venv "$venv" >&2
  torch_dir=$("$CRUCIBLE_PYTHON" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  "$venv/bin/python" -c 'import site, sys; open(site.getsitepackages()[0] + "/crucible-torch.pth", "w").write(sys.argv[1] + "\n")' "$torch_dir"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${TRAINER_PACKAGES[@]}" httpx tenacity pytest >&2
  # --ignore-requires-python for nemo-gym alone among these (see above).
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --ignore-requires-python \
    "${TRAINER_NO_DEPS_PACKAGES[@]}" >&2
  "$venv/bin/python" -c "$imports" || { log "no working trainer packages"; return 1; }
  printf '%s' "$venv/bin/python"
}

ensure_python() {
  if [ -n "${CRUCIBLE_PYTHON:-}" ]; then
    "$CRUCIBLE_PYTHON" -c 'import torch' 2>/dev/null || { log "CRUCIBLE_PYTHON=$CRUCIBLE_PYTHON cannot import torch"; return 1; }
    export CRUCIBLE_PYTHON; return 0
  fi
  local venv
  venv=$(crucible_venv)
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch, triton' 2>/dev/null; then
    # load_inline builds with ninja (venvs made before it was needed lack it).
    # `python -m pip`, not bin/pip: the venv is made as $venv.partial and moved, and its
    # scripts' #! lines still name the old path.
    "$venv/bin/python" -c 'import ninja' 2>/dev/null ||
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check ninja
    # The Python client's tests (clients/python) need its dependencies (httpx, tenacity),
    # pytest and unasync (the check that client.py is generated from aio.py).
    "$venv/bin/python" -c 'import httpx, tenacity, pytest, unasync' 2>/dev/null ||
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check httpx tenacity pytest unasync
    export CRUCIBLE_PYTHON="$venv/bin/python"; return 0
  fi
  if [ -z "${CRUCIBLE_FORCE_VENV:-}" ] && python3 -c 'import torch, triton' 2>/dev/null; then
    export CRUCIBLE_PYTHON="$(command -v python3)"; return 0
  fi
  log "creating the Python environment in $venv (torch + triton, ~5.4 GB, 2-5 min; first time only)"
  local started=$SECONDS
  mkdir -p "$(dirname "$venv")"
  rm -rf "$venv.partial"
  python3 -m venv "$venv.partial"
  "$venv.partial/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
  "$venv.partial/bin/pip" install --quiet --disable-pip-version-check torch triton numpy ninja httpx tenacity pytest unasync
  "$venv.partial/bin/python" -c 'import torch, triton' || { log "venv has no working torch"; return 1; }
  # Made under a temporary name and moved at the end, so an interrupted install is redone.
  rm -rf "$venv" && mv "$venv.partial" "$venv"
  log "python environment ready in $((SECONDS - started)) s, $(du -sh "$venv" | cut -f1)"
  # A venv records its own path in scripts; the interpreter itself is path-independent.
  export CRUCIBLE_PYTHON="$venv/bin/python"
}

# What must be on the machine before anything is built or downloaded: cargo (Rust 1.88 or
# later, Cargo.toml's rust-version), a C compiler (the Rust build and load_inline), and, when
# no Python with torch is found, python3 with its venv module (the ~5 GB environment is made
# with it). Says how to get each missing one and returns 1 without touching anything.
check_prerequisites() {
  local missing=0
  if ! command -v cargo >/dev/null 2>&1; then
    log "missing: cargo (Rust 1.88 or later): https://rustup.rs, or Debian's cargo package where it is 1.88+"
    missing=1
  else
    local rust
    rust=$(rustc --version 2>/dev/null | sed -n 's/^rustc \([0-9]*\.[0-9]*\).*/\1/p')
    if [ -n "$rust" ] && [ "$(printf '%s\n1.88\n' "$rust" | sort -V | head -n1)" != "1.88" ]; then
      log "missing: Rust 1.88 or later (found $rust): rustup update stable"
      missing=1
    fi
  fi
  if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
    log "missing: a C compiler: apt-get install build-essential (Debian/Ubuntu)"
    missing=1
  fi
  if [ -z "${CRUCIBLE_PYTHON:-}" ] && [ ! -x "$(crucible_venv)/bin/python" ] &&
    ! python3 -c 'import torch, triton' 2>/dev/null; then
    if ! command -v python3 >/dev/null 2>&1; then
      log "missing: python3 (3.10 or later): apt-get install python3 python3-venv"
      missing=1
    elif ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
      log "missing: python3's venv module (the torch environment is made with it): apt-get install python3-venv"
      missing=1
    fi
  fi
  return "$missing"
}

# An nvcc for tests/harness/check_nvcc_overlap.py (it compiles and preprocesses; no GPU needed):
# $CRUCIBLE_NVCC, the node's CUDA toolkit, else NVIDIA's own nvcc from PyPI (the
# nvidia-cuda-nvcc wheel and the three it depends on: cicc, the runtime's headers, crt; ~320 MB
# under the cache, a few seconds with a fast mirror; first time only). Exports CRUCIBLE_NVCC.
NVCC_PYPI_VERSION=13.5.37
ensure_nvcc() {
  local found dir
  found=${CRUCIBLE_NVCC:-$(command -v nvcc 2>/dev/null || true)}
  [ -z "$found" ] && [ -x /usr/local/cuda/bin/nvcc ] && found=/usr/local/cuda/bin/nvcc
  if [ -z "$found" ]; then
    dir="${XDG_CACHE_HOME:-$HOME/.cache}/crucible/nvcc-$NVCC_PYPI_VERSION"
    if [ ! -x "$dir/nvidia/cu13/bin/nvcc" ]; then
      log "installing nvcc $NVCC_PYPI_VERSION from PyPI into $dir (first time only)"
      rm -rf "$dir.partial"
      "$CRUCIBLE_PYTHON" -m pip install --quiet --disable-pip-version-check \
        --target "$dir.partial" "nvidia-cuda-nvcc==$NVCC_PYPI_VERSION" >&2
      rm -rf "$dir" && mv "$dir.partial" "$dir"
    fi
    found="$dir/nvidia/cu13/bin/nvcc"
  fi
  "$found" --version >/dev/null || { log "no working nvcc at $found"; return 1; }
  export CRUCIBLE_NVCC="$found"
}

# A C++ compiler: load_inline builds extensions (C++ on any machine, CUDA with nvcc on GPUs).
ensure_cxx() {
  if command -v c++ >/dev/null 2>&1; then return 0; fi
  log "installing g++ from Debian"
  apt_install g++
  command -v c++ >/dev/null 2>&1
}

# curl and jq: the README's examples that scripts/check_doc_examples.py runs call them (jq builds
# the request's JSON and reads the task id back).
ensure_doc_tools() {
  local missing=()
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  command -v jq >/dev/null 2>&1 || missing+=(jq)
  [ "${#missing[@]}" -eq 0 ] && return 0
  log "installing ${missing[*]} from Debian"
  apt_install "${missing[@]}"
  command -v curl >/dev/null 2>&1 && command -v jq >/dev/null 2>&1
}

# redis-server for the tests and for REDIS_URL deployments on this node.
ensure_redis() {
  if ! command -v redis-server >/dev/null 2>&1; then
    log "installing redis-server from Debian"
    apt_install redis-server
    # The package starts a system instance; the tests start their own on free ports.
    command -v redis-server >/dev/null 2>&1
  fi
  # Sentinel (tests/tests/sentinel.rs) is this binary with --sentinel: no redis-sentinel package.
  # deploy/redis.conf's ACL users use selectors and read-/write-only key patterns (Redis 7.0).
  local version
  version=$(redis-server --version | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')
  if [ "${version:-0}" -lt 7 ]; then
    log "$(command -v redis-server) is $(redis-server --version | cut -d' ' -f3); the tests need Redis 7.0 or later"
    return 1
  fi
}

# What the tests of Redis with TLS need: a redis-server built with TLS (Debian's is) and the
# openssl command (deploy/install.sh redis makes the broker's certificates with it).
ensure_tls_tools() {
  if redis-server --port 0 --tls-port 0 2>&1 | grep -q "FATAL CONFIG"; then
    log "$(command -v redis-server) was built without TLS; the tests need one with it (Debian's redis-server)"
    return 1
  fi
  if command -v openssl >/dev/null 2>&1; then return 0; fi
  log "installing openssl from Debian"
  apt_install openssl
  command -v openssl >/dev/null 2>&1
}

# Headless Chromium for the status page's browser test (tests/tests/status_page.rs): Debian's
# `chromium`. That test fails when no browser is found, unless CRUCIBLE_SKIP_BROWSER=1 (a
# developer's opt-out, also honoured here: nothing is installed then); CRUCIBLE_CHROMIUM names
# another Chromium binary.
ensure_chromium() {
  if [ -n "${CRUCIBLE_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 ||
    command -v chromium-browser >/dev/null 2>&1; then
    return 0
  fi
  if [ "${CRUCIBLE_SKIP_BROWSER:-}" = 1 ]; then
    log "no chromium and CRUCIBLE_SKIP_BROWSER=1: the status page's browser test is skipped"
    return 0
  fi
  log "installing chromium from Debian (the status page's browser test)"
  apt_install chromium
  command -v chromium >/dev/null 2>&1
}

# promtool, Prometheus's checker (scripts/check_deploy.sh), as $PROMTOOL: the one on PATH, or
# the one of Debian's prometheus package, unpacked into the cache rather than installed (the
# package would start a Prometheus server on this machine).
ensure_promtool() {
  if command -v promtool >/dev/null 2>&1; then
    PROMTOOL=$(command -v promtool); export PROMTOOL; return 0
  fi
  local dir=${XDG_CACHE_HOME:-$HOME/.cache}/crucible/promtool
  if [ ! -x "$dir/usr/bin/promtool" ]; then
    log "fetching promtool from Debian's prometheus package"
    local sudo="" tmp
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    tmp=$(mktemp -d)
    # apt downloads as its own user where it can write.
    if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
    (cd "$tmp" && apt-get download -qq prometheus >/dev/null)
    mkdir -p "$dir"
    dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$dir" ./usr/bin/promtool
    rm -rf "$tmp"
  fi
  PROMTOOL="$dir/usr/bin/promtool"; export PROMTOOL
}

# systemd-analyze 250 or later (offline security reviews), from Debian's systemd package.
ensure_systemd_analyze() {
  if ! command -v systemd-analyze >/dev/null 2>&1; then
    log "installing systemd (for systemd-analyze) from Debian"
    apt_install systemd
  fi
  local version
  version=$(systemd-analyze --version | sed -n 's/^systemd \([0-9]*\).*/\1/p')
  if [ "${version:-0}" -lt 250 ]; then
    log "systemd-analyze is version ${version:-unknown}; --offline security reviews need 250 or later"
    return 1
  fi
}

# Schemathesis (the API fuzzer of scripts/fuzz-api.sh) from PyPI, in a venv of its own so its
# dependencies never meet torch's; pinned so a new release cannot change what CI checks.
SCHEMATHESIS_VERSION=4.32.5
ensure_schemathesis() {
  local venv=${XDG_CACHE_HOME:-$HOME/.cache}/crucible/schemathesis-venv
  if ! "$venv/bin/python" -m schemathesis.cli --version 2>/dev/null | grep -q "version $SCHEMATHESIS_VERSION\$"; then
    log "installing schemathesis $SCHEMATHESIS_VERSION in $venv"
    mkdir -p "$(dirname "$venv")"
    rm -rf "$venv.partial"
    python3 -m venv "$venv.partial"
    "$venv.partial/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
    # Made under a temporary name and moved at the end, so an interrupted install is redone;
    # it is run as `python -m`, which does not mind the move.
    rm -rf "$venv" && mv "$venv.partial" "$venv"
  fi
  SCHEMATHESIS_PYTHON="$venv/bin/python"; export SCHEMATHESIS_PYTHON
}
